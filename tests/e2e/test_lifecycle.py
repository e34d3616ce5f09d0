"""Scenarios over time on a real API server: drift and audit, the Lease, edits, restarts, removal, order.

Several scenarios reproduce, on a real API server, a defect the unit tests could not show (a restarted
server governing nothing, a release's apply failing after uninstall, preview and the reconciler ignoring
the opt-out label, `helm install` failing before Knative); their docstrings name what would break.
"""

from __future__ import annotations

import json
import time
import unittest

from base import GOVERNED, ClusterCase, wait_for
from cluster import free_port
from install import CHART, NAMESPACE, POLICY, RELEASE, SERVING_CORE, SERVING_HPA

LEASE = "knative-ha-webhook-reconcile"


class Lifecycle(ClusterCase):
    def replicas(self, name: str) -> int:
        return self.kubectl.json("-n", GOVERNED, "deployment", name)["spec"]["replicas"]

    def reconcile_runs(self, server) -> float:
        return server.metric("knative_ha_webhook_reconcile_runs_total")

    def wait_reconcile_run(self, server, limit_s: float = 60) -> None:
        start = self.reconcile_runs(server)
        wait_for(lambda: self.reconcile_runs(server) > start, "a reconcile run", limit_s)

    def test_drift_repaired_and_audit_exit_codes(self):
        server = self.governed_install("reconcile.interval=3s", "reconcile.dryRun=true")  # dry run first
        r = self.audit()
        # In line after install but for the budgets of the Deployments that ship none, which only a
        # writing reconciler creates.
        self.assertEqual(r.returncode, 1, f"the budgets to create: {r.stdout}{r.stderr}")
        drifted = [ln for ln in r.stdout.splitlines() if ln.startswith(GOVERNED)]
        self.assertTrue(drifted, r.stdout)
        for ln in drifted:
            self.assertRegex(ln, r"PodDisruptionBudget\s+\S+-pdb\s+.*created, maxUnavailable", r.stdout)
        self.kubectl.run("-n", GOVERNED, "scale", "deployment", "controller", "--replicas=1")
        r = self.audit()
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertRegex(r.stdout, r"Deployment\s+controller\s+spec\.replicas 1 -> 3")
        self.wait_reconcile_run(server)
        self.assertEqual(self.replicas("controller"), 1, "a dry-run reconciler wrote")
        self.assertGreaterEqual(server.metric("knative_ha_webhook_reconcile_drift_objects"), 1)
        server.stop()
        # As the README says: let the reconciler write (the chart adds the patch verb), restart the server.
        self.install.helm("upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, "--reuse-values",
                          "--set", "reconcile.dryRun=false", *self.install.post_renderer())
        writer = self.start_server("webhook-1")
        wait_for(lambda: self.replicas("controller") == 3, "the reconciler to repair the drift", 60)
        self.assertGreaterEqual(writer.metric("knative_ha_webhook_reconcile_writes_total", result="success"), 1)
        wait_for(lambda: self.audit().returncode == 0, "in line after repair, the budgets created", 30)
        pdb = self.kubectl.json("-n", GOVERNED, "pdb", "controller-pdb")
        self.assertEqual(pdb["metadata"]["annotations"]["knativeha.dev/created-for"], "controller")

    def test_lease_handed_over_between_two_servers(self):
        first = self.governed_install()
        second = self.install.start_server("webhook-1", port=free_port())  # the webhook configuration calls the first

        def holder():
            lease = self.kubectl.json("-n", NAMESPACE, "lease", LEASE)
            return lease["spec"].get("holderIdentity")

        first_holder = wait_for(holder, "a Lease holder", 30)
        self.assertIn(first_holder, ("webhook-0", "webhook-1"))
        leader, other = (first, second) if first_holder == "webhook-0" else (second, first)
        wait_for(lambda: leader.metric("knative_ha_webhook_reconcile_leader") == 1, "the leader's metric", 30)
        t0 = time.monotonic()
        leader.terminate()
        wait_for(lambda: holder() == other.name, f"{other.name} to take the Lease", 30, every_s=0.05)
        print(f"\n  lease handed over {time.monotonic() - t0:.1f} s after SIGTERM")
        self.assertEqual(leader.stop(), 0, "SIGTERM: exit 0")
        wait_for(lambda: other.metric("knative_ha_webhook_reconcile_leader") == 1, "the new leader's metric", 30)

    def test_policy_edit_reaches_running_objects(self):
        self.governed_install("reconcile.dryRun=false")
        self.assertEqual(self.replicas("controller"), 3)
        self.kubectl.run("patch", "highavailabilitypolicy", "serving", "--type=merge", "-p", '{"spec":{"replicas":4}}')
        wait_for(lambda: self.replicas("controller") == 4, "the edit to reach the running controller", 60)
        wait_for(lambda: self.kubectl.json("-n", GOVERNED, "hpa", "webhook")["spec"]["minReplicas"] == 4,
                 "the edit to reach the webhook's HPA", 60)

    def edit_invalid(self) -> bool:
        """Edits the policy to timings client-go refuses; True when the API server stored the edit."""
        r = self.kubectl.run("patch", "highavailabilitypolicy", "serving", "--type=merge", "-p",
                             '{"spec":{"leaderElection":{"renewDeadline":"11s","retryPeriod":"10s"}}}', check=False)
        if r.returncode != 0:
            self.assertIn("renewDeadline", r.stderr, "refused with check's message")
        return r.returncode == 0

    def test_invalid_edit_keeps_the_last_valid_policy(self):
        self.governed_install()
        if self.edit_invalid():
            c = self.wait_policy("serving", "False", "Invalid")
            self.assertIn("renewDeadline", c["message"])
        self.assertEqual(self.probe_replicas(), 3, "the last valid policy still governs")

    def test_restart_after_an_invalid_edit_keeps_governing(self):
        """An invalid edit keeps the last valid spec in force across a restart (else the restarted server governs nothing)."""
        server = self.governed_install()
        server.stop()  # the edit lands while the webhook is down (or was made invalid by a stricter release)
        self.assertTrue(self.edit_invalid(), "with the webhook down, only the CRD's own rules apply")
        self.start_server("webhook-1")
        self.wait_policy("serving", "False", "Invalid")
        self.apply_knative(SERVING_CORE, SERVING_HPA)
        self.assertEqual(self.replicas("controller"), 3, "a restart ungoverned the namespace")
        self.assertEqual(self.kubectl.json("-n", GOVERNED, "hpa", "activator")["spec"]["minReplicas"], 5)

    def test_restart_on_a_stricter_release_keeps_governing_without_the_refused_setting(self):
        """A recorded last valid spec this release refuses in part still governs, less that part."""
        server = self.governed_install()

        def status() -> dict:
            return self.kubectl.json("highavailabilitypolicy", "serving").get("status", {})

        wait_for(lambda: status().get("lastValidSpec"), "the record of the last valid spec", 30)
        server.stop()
        # As an earlier release without the rule against blocking budgets would have recorded (and applied) it: a budget that
        # blocks every drain. The CRD accepts it; this release's rules refuse it.
        record = status()["lastValidSpec"]
        record["podDisruptionBudget"] = {"minAvailable": "100%", "maxUnavailable": None}
        self.kubectl.run("patch", "highavailabilitypolicy", "serving", "--subresource=status", "--type=merge",
                         "-p", json.dumps({"status": {"lastValidSpec": record}}))
        self.assertTrue(self.edit_invalid(), "with the webhook down, only the CRD's own rules apply")
        server = self.start_server("webhook-1")
        c = self.wait_policy("serving", "False", "LastValidRefusedByThisRelease")
        self.assertIn('spec.podDisruptionBudget.minAvailable: "100%" allows no voluntary disruption', c["message"])
        self.assertIn("stays in force without spec.podDisruptionBudget; fix the policy", c["message"])
        self.apply_knative(SERVING_CORE, SERVING_HPA)
        self.assertEqual(self.replicas("controller"), 3, "a stricter release ungoverned the namespace")
        self.assertEqual(self.kubectl.json("-n", GOVERNED, "hpa", "activator")["spec"]["minReplicas"], 5)
        for pdb in self.kubectl.json("-n", GOVERNED, "pdb")["items"]:
            self.assertNotEqual(pdb["spec"].get("minAvailable"), "100%", f"the refused budget applied: {pdb}")
        self.assertEqual(server.metric("knative_ha_webhook_policies_on_refused_last_valid", source="policies"), 1)
        self.assertEqual(status()["lastValidSpec"], record | {"podDisruptionBudget": {"minAvailable": "100%"}},
                         "the record stays as it was written")

    def test_uninstall_as_documented_then_the_release_applies_again(self):
        """After the documented uninstall, the release's own apply works again (else it fails on its PDBs)."""
        self.governed_install()
        # docs/operations.md, "Uninstalling": the policies, restore, the chart, the CRD.
        self.kubectl.run("delete", "highavailabilitypolicies", "--all")
        wait_for(lambda: self.probe_replicas() == 1, "the namespace to be ungoverned", 30)
        r = self.cli("restore", "--kubeconfig", self.api.kubeconfig, "--namespace", GOVERNED)
        self.assertEqual(r.returncode, 0, f"{r.stdout}{r.stderr}")
        self.install.helm("uninstall", RELEASE, "--namespace", NAMESPACE)
        self.install.stop_servers()
        self.kubectl.run("delete", "crd", "highavailabilitypolicies.knativeha.dev")
        for f in self.install.knative_files():
            r = self.kubectl.apply(str(f), check=False)
            self.assertEqual(r.returncode, 0, f"kubectl apply -f {f.name} after uninstall: {r.stderr}")
        pdb = self.kubectl.json("-n", GOVERNED, "pdb", "activator-pdb")["spec"]
        self.assertEqual(pdb.get("minAvailable"), "80%")
        self.assertNotIn("maxUnavailable", pdb)
        self.assertEqual(self.kubectl.json("-n", GOVERNED, "hpa", "activator")["spec"]["minReplicas"], 1)
        annotations = self.kubectl.json("-n", GOVERNED, "deployment", "controller")["metadata"].get("annotations", {})
        self.assertEqual([k for k in annotations if k.startswith("knativeha.dev/")], [], "records left")

    def test_policy_deleted_changes_nothing_and_the_release_applies_again(self):
        """A deleted policy (an accident, a GitOps prune) drops no HA by itself: the objects keep their
        values; the release's next `kubectl apply` succeeds (each PDB keeps one budget field); `restore`
        is the one command that puts the release back."""
        self.governed_install("reconcile.interval=3s")
        # webhook-pdb: the policy's maxUnavailable 1 from the webhook's 3 up, in the release's field (the
        # activator's 80% from 5 up already comes closest and stays).
        governed = self.kubectl.json("-n", GOVERNED, "pdb", "webhook-pdb")["spec"]
        self.assertEqual(governed.get("minAvailable"), "66%", "governed first, in the release's field")
        self.kubectl.run("delete", "highavailabilitypolicy", "serving")
        wait_for(lambda: self.probe_replicas() == 1, "the namespace to be ungoverned", 30)
        time.sleep(5)  # more than a reconcile interval: nothing may undo it meanwhile
        self.assertEqual(self.replicas("autoscaler"), 3, "the policy's replicas stay")
        self.assertEqual(self.kubectl.json("-n", GOVERNED, "pdb", "webhook-pdb")["spec"].get("minAvailable"), "66%")
        for f in self.install.knative_files():
            r = self.kubectl.apply(str(f), check=False)
            self.assertEqual(r.returncode, 0, f"kubectl apply -f {f.name} with the policy deleted: {r.stderr}")
        for name in ("activator-pdb", "webhook-pdb"):
            spec = self.kubectl.json("-n", GOVERNED, "pdb", name)["spec"]
            self.assertEqual(spec.get("minAvailable"), "80%", name)  # the release's apply set its own value
            self.assertNotIn("maxUnavailable", spec, name)
        r = self.cli("restore", "--kubeconfig", self.api.kubeconfig, "--namespace", GOVERNED)
        self.assertEqual(r.returncode, 0, f"{r.stdout}{r.stderr}")
        self.assertEqual(self.kubectl.json("-n", GOVERNED, "hpa", "activator")["spec"]["minReplicas"], 1)
        self.assertEqual(self.replicas("autoscaler"), 1, "the release's replicas, by restore")
        annotations = self.kubectl.json("-n", GOVERNED, "deployment", "controller")["metadata"].get("annotations", {})
        self.assertEqual([k for k in annotations if k.startswith("knativeha.dev/")], [], "records left")

    def test_policy_deleted_with_the_undo_opted_in(self):
        """`undoWhenPolicyDeleted=true` (serve --undo-unclaimed): the webhook and the reconciler put the
        release's values back once the policy is gone."""
        self.governed_install("reconcile.interval=3s", "undoWhenPolicyDeleted=true")
        self.kubectl.run("delete", "highavailabilitypolicy", "serving")
        wait_for(lambda: self.replicas("autoscaler") == 1, "the reconciler to put the release's replicas back", 60)
        budget = lambda: self.kubectl.json("-n", GOVERNED, "pdb", "activator-pdb")["spec"].get("minAvailable")  # noqa: E731
        wait_for(lambda: budget() == "80%", "the release's budget back on activator-pdb (one restore pass)", 30)

    def test_opt_out_label_is_honoured_everywhere(self):
        """The opt-out label is honoured by preview and the reconciler too (else preview patches it, the reconciler scales it back)."""
        server = self.governed_install("reconcile.interval=3s", "reconcile.dryRun=false")
        self.kubectl.run("-n", GOVERNED, "label", "deployment", "controller", "knativeha.dev/skip=true")
        self.kubectl.run("-n", GOVERNED, "scale", "deployment", "controller", "--replicas=1")
        stored = self.kubectl.run("-n", GOVERNED, "get", "deployment", "controller", "-o", "json").stdout
        r = self.cli("preview", "--policy-file", str(POLICY), "-o", "patches", stdin=stored)
        self.assertEqual(r.stdout.strip(), "", "preview patches an opted-out object")
        self.assertNotRegex(self.audit().stdout, r"Deployment\s+controller\s", "audit reports an opted-out object")
        self.wait_reconcile_run(server)
        self.wait_reconcile_run(server)
        self.assertEqual(self.replicas("controller"), 1, "the reconciler wrote an opted-out Deployment")

    def test_kubectl_scale_keeps_a_disable_ha_deployment_at_one_replica(self):
        """The scale subresource carries no pod template, so `--disable-ha` cannot go: the Scale is held at one replica."""
        self.install_chart()
        self.start_server()
        self.apply_policy("apiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\nmetadata: {name: serving}\n"
                          "spec: {targetNamespace: knative-serving, leaderElection: {enabled: false}}\n")
        self.apply_knative(SERVING_CORE, SERVING_HPA)
        args = self.kubectl.json("-n", GOVERNED, "deployment", "autoscaler-hpa")["spec"]["template"]["spec"]["containers"][0]["args"]
        self.assertIn("--disable-ha", args)
        r = self.kubectl.run("-n", GOVERNED, "scale", "deployment", "autoscaler-hpa", "--replicas=3")
        self.assertIn("through the scale subresource", r.stderr)
        self.assertEqual(self.replicas("autoscaler-hpa"), 1, "three replicas without a leader")

    def test_install_before_knative(self):
        """The chart installs before Knative (else `helm install` fails: namespaces "knative-serving" not found)."""
        self.install_chart("rbac.scope=cluster", governed_namespace_first=False)
        self.start_server()
        self.apply_policy()
        self.apply_knative()
        self.assertEqual(self.replicas("controller"), 3)
        self.assertEqual(json.loads(self.kubectl.run("-n", GOVERNED, "get", "hpa", "activator", "-o", "json").stdout)
                         ["spec"]["minReplicas"], 5)

    def test_held_back_durations_leave_the_hash_alone(self):
        """The hash covers what config-leader-election really gets (serve watches it)."""
        self.governed_install()
        # The policy sets only renewDeadline: 20s; the ConfigMap's retry-period 30s makes the merged set
        # invalid (20s < 1.2 x 30s), so the ConfigMap gets no duration from the policy.
        self.kubectl.run("patch", "highavailabilitypolicy", "serving", "--type=merge", "-p",
                         '{"spec":{"leaderElection":{"leaseDuration":null,"retryPeriod":null,"renewDeadline":"20s"}}}')
        self.wait_policy("serving", "True", "Valid")
        r = self.kubectl.run("-n", GOVERNED, "patch", "configmap", "config-leader-election", "--type=merge",
                             "-p", '{"data":{"retry-period":"30s"}}')
        self.assertIn("leader election durations not written", r.stderr)
        text = "enabled=true;buckets=5;lease=default;renew=default;retry=default"
        fnv = 0xCBF29CE484222325
        for byte in text.encode():
            fnv = ((fnv ^ byte) * 0x100000001B3) % 2**64
        want = f"{fnv:016x}"
        pokes = iter(range(1_000_000))

        def hash_after_an_update():
            # Each UPDATE is admitted with the server's snapshot, which has the ConfigMap once its watch saw it.
            self.kubectl.run("-n", GOVERNED, "annotate", "--overwrite", "deployment", "controller",
                             f"khw-e2e/poke={next(pokes)}")
            d = self.kubectl.json("-n", GOVERNED, "deployment", "controller")
            got = d["spec"]["template"]["metadata"].get("annotations", {}).get("knativeha.dev/leader-election-hash")
            return got == want

        wait_for(hash_after_an_update, f"the controller's hash to be {want} (no durations)", 30, every_s=1)


if __name__ == "__main__":
    unittest.main()
