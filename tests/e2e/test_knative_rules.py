"""Knative's rules as the webhook applies them at admission on a real API server: leases the Lease API
accepts, budgets judged at what runs, `kubectl scale` of an excluded Deployment, no hash where Knative
reads none of the settings, no empty leftovers, HPA bounds within int32."""

from __future__ import annotations

import json
import unittest

from base import GOVERNED, ClusterCase, wait_for
from install import KOURIER, SERVING_CORE, SERVING_HPA

BASE = "apiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\nmetadata: {name: serving}\nspec:\n" \
       "  targetNamespace: knative-serving\n"
HASH = "knativeha.dev/leader-election-hash"


class KnativeRules(ClusterCase):
    def govern(self, spec: str, *files):
        """Chart, server, the policy `spec` Ready, then the release files applied through the webhook."""
        self.install_chart()
        self.start_server()
        self.apply_policy(BASE + spec)
        self.wait_policy("serving", "True")
        self.apply_knative(*(files or (SERVING_CORE, SERVING_HPA)))

    def get(self, kind: str, name: str) -> dict:
        return self.kubectl.json("-n", GOVERNED, kind, name)

    def test_a_sub_second_lease_is_refused_before_it_reaches_the_cluster(self):
        self.install_chart()
        self.start_server()
        r = self.kubectl.apply(BASE + "  leaderElection: {leaseDuration: 900ms, renewDeadline: 800ms, retryPeriod: 100ms}\n",
                               check=False)
        self.assertNotEqual(r.returncode, 0, "a policy with leaseDuration 900ms was admitted")
        self.assertIn("whole number of seconds", r.stderr)

    def test_scale_of_an_excluded_deployment_passes(self):
        self.govern("  leaderElection: {enabled: false}\n  exclude: [autoscaler-hpa]\n")
        self.kubectl.run("-n", GOVERNED, "scale", "deployment", "autoscaler-hpa", "--replicas=3")
        self.assertEqual(self.get("deployment", "autoscaler-hpa")["spec"]["replicas"], 3)

    def test_no_hash_where_config_leader_election_opts_out(self):
        self.install_chart()
        self.start_server()
        self.apply_policy(BASE + "  leaderElection: {buckets: 3}\n")
        self.wait_policy("serving", "True")
        self.apply_knative(SERVING_CORE)
        self.assertIn(HASH, self.get("deployment", "controller")["spec"]["template"]["metadata"]["annotations"])
        self.kubectl.run("-n", GOVERNED, "label", "configmap", "config-leader-election", "knativeha.dev/skip=true")

        touch = iter(range(1000))

        def hash_gone() -> bool:
            # The server watches the ConfigMap; the next write of the controller drops the hash.
            self.kubectl.run("-n", GOVERNED, "annotate", "deployment", "controller", "--overwrite",
                             f"touch={next(touch)}")
            annotations = self.get("deployment", "controller")["spec"]["template"]["metadata"].get("annotations", {})
            return HASH not in annotations

        wait_for(hash_gone, "the hash to go once config-leader-election opts out", 30)

    def test_dropped_required_and_disable_ha_leave_no_empty_fields(self):
        """net-kourier-controller ships neither affinity nor args: after a policy that gave it Required
        anti-affinity and --disable-ha, one that asks for neither leaves it without either field."""
        self.govern("  podAntiAffinity: {type: Required, topologyKey: topology.kubernetes.io/zone}\n"
                    "  leaderElection: {enabled: false}\n", KOURIER)
        spec = self.get("deployment", "net-kourier-controller")["spec"]["template"]["spec"]
        self.assertIn("--disable-ha", spec["containers"][0].get("args", []))
        self.assertIn("requiredDuringSchedulingIgnoredDuringExecution", spec["affinity"]["podAntiAffinity"])
        self.apply_policy(BASE + "  leaderElection: {enabled: true}\n")
        touch = iter(range(1000))

        def clean() -> bool:
            # Any write of the Deployment passes the webhook, which applies the new policy.
            self.kubectl.run("-n", GOVERNED, "annotate", "deployment", "net-kourier-controller", "--overwrite",
                             f"touch={next(touch)}")
            spec = self.get("deployment", "net-kourier-controller")["spec"]["template"]["spec"]
            return "args" not in spec["containers"][0] and "affinity" not in spec

        wait_for(clean, "net-kourier-controller without args or affinity", 30)

    def assert_budget_held_back_after(self, *hpa_change: str, why: str):
        """The activator-pdb governed at `minAvailable: 2` (3 replicas), then `kubectl HPA_CHANGE` on the
        activator's HPA: the PDB's next write is judged at the 1 pod that runs, so the policy's budget,
        which would block every drain there, is held back and the written 80% stays."""
        self.install_chart()
        self.start_server()
        self.apply_policy(BASE + "  replicas: 3\n  podDisruptionBudget: {minAvailable: 2}\n")
        self.wait_policy("serving", "True")
        self.apply_knative(SERVING_CORE)
        self.assertEqual(self.get("pdb", "activator-pdb")["spec"].get("minAvailable"), 2)
        self.kubectl.run("-n", GOVERNED, *hpa_change)

        def released() -> bool:
            # The server watches the HPAs: retried until it has seen the change.
            pdb = self.get("pdb", "activator-pdb")
            pdb["spec"]["minAvailable"] = "80%"
            for k in ("resourceVersion", "uid", "creationTimestamp", "managedFields", "generation"):
                pdb["metadata"].pop(k, None)
            r = self.kubectl.run("replace", "-o", "json", "-f", "-", stdin=json.dumps(pdb))
            return json.loads(r.stdout)["spec"].get("minAvailable") == "80%"

        wait_for(released, f"activator-pdb's minAvailable 2 held back {why}", 30)

    def test_budget_judged_at_one_replica_where_the_hpa_opts_out(self):
        self.assert_budget_held_back_after("label", "hpa", "activator", "knativeha.dev/skip=true",
                                           why="with its HPA opted out")

    def test_budget_judged_at_one_replica_where_the_hpa_is_gone(self):
        # The server's HPA watch lists every HPA: the activator has none.
        self.assert_budget_held_back_after("delete", "hpa", "activator", why="with the activator's HPA deleted")

    def test_required_on_one_replica_keeps_a_surge_first_rollout(self):
        self.govern("  podAntiAffinity: {type: Required}\n")
        strategy = self.get("deployment", "controller")["spec"]["strategy"]
        self.assertNotEqual(strategy.get("rollingUpdate", {}).get("maxUnavailable"), 1, strategy)

    def test_hpa_maximum_stays_within_int32(self):
        self.install_chart()
        self.start_server()
        self.apply_policy(BASE + "  replicas: 3\n")
        self.wait_policy("serving", "True")
        hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
               "metadata": {"name": "activator", "namespace": GOVERNED},
               "spec": {"minReplicas": 1, "maxReplicas": 2147483647,
                        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "activator"}}}
        self.kubectl.run("create", "namespace", GOVERNED, check=False)
        r = self.kubectl.apply(json.dumps(hpa) + "\n", check=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        spec = self.get("hpa", "activator")["spec"]
        self.assertEqual((spec["minReplicas"], spec["maxReplicas"]), (3, 2147483647))


if __name__ == "__main__":
    unittest.main()
