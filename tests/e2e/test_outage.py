"""When the webhook is not in the write path, and which objects it governs, on a real API server.

The chart's webhook has `failurePolicy: Ignore`: while the server is down the API server admits writes
unmutated (and counts them in `apiserver_admission_webhook_fail_open_count`). What the engine wrote must
stay valid for every writer that bypasses it: Knative's own `kubectl apply` of the next release, client-
and server-side (without `--force-conflicts`).
"""

from __future__ import annotations

import json
import time
import unittest
from pathlib import Path

from base import GOVERNED, ClusterCase, wait_for, webhook_metrics
from install import KNATIVE, ROOT

PREVIOUS = ROOT / "tests" / "fixtures" / "knative-v1.20.0"
RELEASE_120 = tuple(PREVIOUS / f for f in ("2-serving-core.yaml", "3-serving-hpa.yaml", "net-kourier.yaml"))
RELEASE_123 = tuple(KNATIVE / f for f in ("2-serving-core.yaml", "3-serving-hpa.yaml", "net-kourier.yaml"))


class Outage(ClusterCase):
    """Scenarios that stop the webhook on purpose: fail-opens are expected and only printed."""

    FAIL_OPEN_EXPECTED = True

    def budgets(self) -> dict[str, dict]:
        out = {}
        for pdb in self.kubectl.json("-n", GOVERNED, "pdb")["items"]:
            spec = pdb["spec"]
            out[pdb["metadata"]["name"]] = {k: spec[k] for k in ("minAvailable", "maxUnavailable") if k in spec}
        return out

    def governed_120(self):
        """Chart, server, the example policy Ready, then Knative v1.20.0 applied through the webhook."""
        self.install_chart()
        server = self.start_server()
        self.apply_policy()
        self.wait_policy("serving", "True")
        self.apply_knative(*RELEASE_120)
        return server

    def test_release_applies_client_side_while_the_webhook_is_down(self):
        server = self.governed_120()
        governed = self.budgets()
        self.assertEqual(governed["webhook-pdb"], {"minAvailable": "66%"}, "the budget in the release's own field")
        server.stop()
        # Knative's upgrade with the webhook down: kubectl's three-way merge sets the release's
        # minAvailable again; the PDB must not end with both fields (the API server refuses that).
        for f in self.install.knative_files(*RELEASE_123):
            r = self.kubectl.apply(str(f), check=False)
            if r.returncode != 0:
                r = self.kubectl.apply(str(f), check=False)
            self.assertEqual(r.returncode, 0, f"kubectl apply of {f.name} with the webhook down: {r.stderr}")
        after = self.budgets()
        self.assertTrue(all(len(b) == 1 for b in after.values()), after)
        m = webhook_metrics(self.api.raw("/metrics"))
        self.assertGreater(m["fail_open_count"], 0, "the apply went through the API server's fail-open path")
        drifted = self.audit()
        self.assertEqual(drifted.returncode, 1, f"the outage left drift: {drifted.stdout}{drifted.stderr}")
        # The webhook back, with the chart's defaults: its reconciler's first pass runs at once and repairs.
        start = time.monotonic()
        self.start_server("webhook-1")
        wait_for(lambda: self.audit().returncode == 0, "HA back after the outage (audit exit 0)", 60)
        print(f"\n  budgets: governed {governed}, after the release's apply with the webhook down {after}; "
              f"in line again {time.monotonic() - start:.1f}s after the webhook restarted")

    def ssa(self, *files: Path) -> list[str]:
        """`kubectl apply --server-side` (no --force-conflicts) of each file; the failures' stderr."""
        failed = []
        for f in self.install.knative_files(*files):
            r = self.kubectl.apply(str(f), "--server-side", check=False)
            if r.returncode != 0 and "conflict" not in r.stderr:  # CRDs not yet established: once more
                r = self.kubectl.apply(str(f), "--server-side", check=False)
            if r.returncode != 0:
                lines = [ln for ln in r.stderr.splitlines() if not ln.startswith("Warning:")]
                failed.append(f"{f.name}: {' '.join(lines[:3]) or r.returncode}")
        return failed

    def test_release_applies_server_side_while_the_webhook_is_down(self):
        """A GitOps-style install (server-side apply throughout) governed by the webhook: the next
        release's server-side apply, without --force-conflicts, with the webhook down."""
        self.install_chart()
        server = self.start_server()
        self.apply_policy()
        self.wait_policy("serving", "True")
        self.assertEqual(self.ssa(*RELEASE_120), [])
        self.assertEqual(self.budgets()["webhook-pdb"], {"minAvailable": "66%"})
        server.stop()
        self.assertEqual(self.ssa(*RELEASE_123), [], "server-side apply of v1.23.0 with the webhook down")
        self.assertTrue(all(len(b) == 1 for b in self.budgets().values()), self.budgets())

    def test_server_side_apply_after_a_reconciler_write(self):
        """A server-side applied release, applied again while the webhook is down (the HPA's minimum back
        to 1), drift repaired by the reconciler (its JSON patch, field manager
        knative-ha-webhook-reconciler), then the release's next server-side apply without
        --force-conflicts succeeds: the repaired fields went back to their manager (red before:
        `conflict with "knative-ha-webhook-reconciler" using autoscaling/v2: .spec.minReplicas`)."""
        self.install_chart("reconcile.interval=3s")
        server = self.start_server()
        self.apply_policy()
        self.wait_policy("serving", "True")
        self.assertEqual(self.ssa(*RELEASE_123), [])
        governed = self.activator_min_replicas()
        server.stop()
        self.assertEqual(self.ssa(*RELEASE_123), [], "the release applies with the webhook down")
        self.assertEqual(self.activator_min_replicas(), "1", "the apply during the outage took the HPA back")
        self.start_server("webhook-1")
        wait_for(lambda: self.audit().returncode == 0, "the reconciler to repair the drift", 60)
        owners = self.activator_hpa_owners()
        self.assertNotIn("f:minReplicas", owners.get("knative-ha-webhook-reconciler", ""), owners)
        self.assertIn("f:minReplicas", owners.get("kubectl", ""), owners)
        failed = self.ssa(*RELEASE_123)
        print(f"  server-side apply after a reconciler write: {failed}")
        self.assertEqual(failed, [], "the reconciler's write took a field the release's applier sets")
        self.assertEqual(self.activator_min_replicas(), governed, "the webhook governs the apply again")

    def test_a_field_two_appliers_shared_names_the_reconciler_in_a_conflict(self):
        """Two server-side appliers (kubectl and a GitOps controller) apply the same release, so they share
        the HPA's minReplicas; the webhook is down for a release apply, and the reconciler repairs the
        drift. The repaired field stays the reconciler's: a re-apply without --force-conflicts conflicts
        naming knative-ha-webhook-reconciler, which wrote the value (handed to both, the conflict named the
        other applier, which never did)."""
        self.install_chart("reconcile.interval=3s")
        server = self.start_server()
        self.apply_policy()
        self.wait_policy("serving", "True")
        # (A CRD of the file may not be established at the first pass: once more, as users do.)
        self.assertEqual(self.ssa(*RELEASE_123) and self.ssa(*RELEASE_123), [])
        server.stop()
        for manager in ("kubectl", "gitops"):
            for f in self.install.knative_files(*RELEASE_123):
                self.kubectl.apply(str(f), "--server-side", f"--field-manager={manager}", "--force-conflicts",
                                   check=False)
        self.start_server("webhook-1")
        wait_for(lambda: self.audit().returncode == 0, "the reconciler to repair the drift", 60)
        owners = self.activator_hpa_owners()
        self.assertIn("f:minReplicas", owners.get("knative-ha-webhook-reconciler", ""), owners)
        failed = self.ssa(*RELEASE_123)
        print(f"  kubectl's server-side re-apply: {failed}")
        hpa_conflicts = [f for f in failed if "minReplicas" in f]
        self.assertTrue(all("knative-ha-webhook-reconciler" in f and "gitops" not in f for f in hpa_conflicts),
                        failed)

    def activator_hpa_owners(self) -> dict[str, str]:
        """The activator HPA's field managers and what each owns (printed)."""
        hpa = json.loads(self.kubectl.run("-n", GOVERNED, "get", "hpa", "activator", "-o", "json",
                                          "--show-managed-fields").stdout)
        owners = {e["manager"]: json.dumps(e.get("fieldsV1", {})) for e in hpa["metadata"]["managedFields"]}
        print(f"\n  after the repair, managers of the activator's HPA: {sorted(owners)}")
        return owners

    def activator_min_replicas(self) -> str:
        return self.kubectl.run("-n", GOVERNED, "get", "hpa", "activator", "-o", "jsonpath={.spec.minReplicas}").stdout

    def test_server_side_over_client_side_conflicts_without_the_webhook_too(self):
        """What the first server-side apply over a client-side install meets is kubectl's and Knative's,
        not the webhook's: with no policy at all, the v1.23.0 server-side apply over a client-side
        v1.20.0 conflicts with kubectl-client-side-apply on the fields the release changes (the docs
        say to pass --force-conflicts once)."""
        self.install_chart()
        self.start_server()
        self.apply_knative(*RELEASE_120)
        failed = self.ssa(*RELEASE_123)
        print(f"\n  no policy, server-side over client-side: {failed}")
        self.assertTrue(any("conflict" in f and "kubectl-client-side-apply" in f for f in failed), failed)

    def test_a_users_own_objects_are_admitted_unchanged(self):
        self.install_chart()
        self.start_server()
        self.apply_policy()
        self.wait_policy("serving", "True")
        app = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "my-app", "namespace": GOVERNED},
               "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "my-app"}},
                        "template": {"metadata": {"labels": {"app": "my-app"}},
                                     "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}}
        pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": "redis-pdb", "namespace": GOVERNED},
               "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "redis"}}}}
        self.kubectl.run("create", "namespace", GOVERNED, check=False)
        for obj in (app, pdb):
            r = self.kubectl.run("apply", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(obj))
            stored = json.loads(r.stdout)
            self.assertEqual(stored["spec"].get("replicas", stored["spec"].get("maxUnavailable")), 1, r.stdout)
            self.assertNotIn("(policy ", r.stderr, f"{obj['metadata']['name']} was mutated: {r.stderr}")
        # The same Deployment named by the policy is governed.
        named = Path(self.workdir) / "named.yaml"
        named.write_text(Path(ROOT / "examples" / "policy.yaml").read_text().replace(
            "  workloads:\n", "  workloads:\n    - name: my-app\n      replicas: 2\n"))
        self.apply_policy(str(named))

        def replicas() -> int:
            r = self.kubectl.run("apply", "--dry-run=server", "-o", "json", "-f", "-", stdin=json.dumps(app))
            return json.loads(r.stdout)["spec"]["replicas"]

        wait_for(lambda: replicas() == 2, "my-app, named in workloads, to be governed", 30)


if __name__ == "__main__":
    unittest.main()
