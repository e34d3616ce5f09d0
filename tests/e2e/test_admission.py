"""Scenarios of admission on a real API server: what it stores, re-applies, upgrades, conflicts, ConfigMaps."""

from __future__ import annotations

import json
import re
import unittest

from base import GOVERNED, ClusterCase, subset_diff, wait_for, webhook_metrics
from install import KOURIER, NAMESPACE, POLICY, SERVING_CORE, SERVING_HPA

RECORDED_REPLICAS = "knativeha.dev/original-replicas"
SPEC_KEYS = {"Deployment": "spec", "HorizontalPodAutoscaler": "spec", "PodDisruptionBudget": "spec", "ConfigMap": "data"}


class Admission(ClusterCase):
    def assert_stored_equals_preview(self, *manifests):
        manifests = manifests or (SERVING_CORE, SERVING_HPA, KOURIER)
        stored = self.governed_objects()
        compared = 0
        for want in self.preview(*manifests):
            key = (want["kind"], want["metadata"]["name"])
            if want["metadata"].get("namespace") != GOVERNED or key not in stored:
                continue
            got = stored[key]
            field = SPEC_KEYS[want["kind"]]
            diff = subset_diff(want.get(field), got.get(field), field)
            want_annotations = dict(want["metadata"].get("annotations", {}))
            if want["kind"] == "Deployment" and want_annotations.get(RECORDED_REPLICAS) == "null":
                # The API server defaults an unset spec.replicas to 1 before admission, so the
                # webhook records the release's replicas as 1 where preview (no defaulting) sees none.
                want_annotations[RECORDED_REPLICAS] = "1"
            diff += subset_diff(want_annotations, got["metadata"].get("annotations", {}), "metadata.annotations")
            self.assertEqual(diff, [], f"{key}: stored object differs from preview")
            compared += 1
        # Every governed Deployment, HPA and PDB of the release, and config-leader-election.
        self.assertGreaterEqual(compared, 11)
        # And the engine has nothing left to change on what the API server stored.
        listed = self.kubectl.run("get", "-n", GOVERNED, "deployments,hpa,pdb,configmaps", "-o", "json").stdout
        r = self.cli("preview", "--policy-file", str(POLICY), "-o", "patches", stdin=listed)
        self.assertEqual(r.returncode, 0, r.stderr)
        # Leaving out the budgets the reconciler creates (the webhook creates nothing).
        changed = [ln for ln in r.stdout.splitlines()
                   if ln.strip() and not any(": created, " in c for c in json.loads(ln)["changes"])]
        self.assertEqual(changed, [], "preview of the stored objects still finds changes")

    def resource_versions(self) -> dict:
        return {k: o["metadata"]["resourceVersion"] for k, o in self.governed_objects().items()}

    def test_stored_objects_equal_preview(self):
        self.governed_install()
        self.assert_stored_equals_preview()

    def test_reapply_writes_nothing(self):
        self.governed_install()
        # In line first: the reconciler's settle pass creates the budgets of Deployments the release's
        # apply created last (autoscaler-hpa-pdb), seconds after the apply returns.
        wait_for(lambda: self.audit().returncode == 0, "the governed release in line (audit exit 0)", 90)
        before = self.resource_versions()
        self.apply_knative()
        self.assertEqual(self.resource_versions(), before, "a second client-side apply wrote governed objects")
        specs = {k: o.get(SPEC_KEYS[k[0]]) for k, o in self.governed_objects().items()}
        self.apply_knative(server_side=True)
        after = {k: o.get(SPEC_KEYS[k[0]]) for k, o in self.governed_objects().items()}
        changed = [k for k in specs if k[0] == "Deployment" and specs[k] != after.get(k)]
        self.assertEqual(changed, [], "server-side apply of the release changed Deployment specs")
        self.assert_stored_equals_preview()

    def test_only_config_leader_election_of_the_configmaps_reaches_the_webhook(self):
        """The webhook's rules cannot name an object; its matchConditions can: a ConfigMap write in a
        governed namespace other than config-leader-election is never sent to the webhook."""
        self.governed_install()
        sent = lambda: webhook_metrics(self.api.raw("/metrics"))["request_total"]  # noqa: E731
        before = sent()
        for i in range(5):
            self.kubectl.run("-n", GOVERNED, "create", "configmap", f"other-{i}", f"--from-literal=k={i}")
        self.assertEqual(sent(), before, "a ConfigMap other than config-leader-election was sent to the webhook")
        self.kubectl.run("-n", GOVERNED, "annotate", "configmap", "config-leader-election", "touched=yes")
        self.assertEqual(sent(), before + 1, "config-leader-election is still sent")

    def test_upgrade_keeps_ha(self):
        """A previous release (v1.23.0 relabelled 1.22.0 with other image digests: the repository holds only
        v1.23.0), then v1.23.0: every governed Deployment is UPDATEd and keeps the policy."""
        self.install_chart()
        self.start_server()
        self.apply_policy()
        previous = self.install.dir / "previous"
        previous.mkdir()
        older = []
        for f in (SERVING_CORE, SERVING_HPA, KOURIER):
            text = f.read_text().replace('app.kubernetes.io/version: "1.23.0"', 'app.kubernetes.io/version: "1.22.0"')
            text = re.sub(r"@sha256:[0-9a-f]{64}", "@sha256:" + "1" * 64, text)
            (previous / f.name).write_text(text)
            older.append(previous / f.name)
        self.apply_knative(*older)
        generations = {k: o["metadata"]["generation"] for k, o in self.governed_objects().items() if k[0] == "Deployment"}
        self.apply_knative()
        upgraded = {k: o["metadata"]["generation"] for k, o in self.governed_objects().items() if k[0] == "Deployment"}
        self.assertTrue(all(upgraded[k] > g for k, g in generations.items()), f"not every Deployment was updated: {upgraded}")
        self.assert_stored_equals_preview()

    def test_two_policies_for_one_namespace(self):
        self.governed_install()
        second = ("apiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\nmetadata: {name: serving-two}\n"
                  "spec: {targetNamespace: knative-serving, replicas: 2}\n")
        self.kubectl.apply(second)
        c = self.wait_policy("serving-two", "False", "Conflict")
        self.assertIn("serving", c["message"])
        self.wait_policy("serving", "True")
        self.apply_knative(SERVING_CORE)
        controller = self.kubectl.json("-n", GOVERNED, "deployment", "controller")
        self.assertEqual(controller["spec"]["replicas"], 3, "the older policy stays in force")

    def test_configmap_policy_and_its_event(self):
        self.install_chart()
        server = self.start_server()
        self.assertEqual(self.probe_replicas(), 1, "no policy yet: the probe is admitted unchanged")
        bad = "apiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\nmetadata: {name: cm}\n" \
              "spec: {targetNamespace: knative-serving, replcas: 3}\n"
        cm = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": "serving-policy", "namespace": NAMESPACE, "labels": {"knativeha.dev/policy": "true"}},
              "data": {"policy.yaml": bad}}
        # The validating webhook refuses it with check's message ...
        r = self.kubectl.apply(json.dumps(cm) + "\n", check=False)
        self.assertNotEqual(r.returncode, 0, "an invalid policy ConfigMap was admitted")
        self.assertIn("replcas", r.stderr)
        # ... and one that got in while the webhook was down gets its Invalid Event.
        server.stop()
        self.kubectl.apply(json.dumps(cm) + "\n")
        self.start_server("webhook-1")

        def invalid_event():
            events = self.kubectl.json("-n", NAMESPACE, "events.events.k8s.io")["items"]
            return [e for e in events if e.get("regarding", {}).get("name") == "serving-policy" and e.get("reason") == "Invalid"]

        ev = wait_for(invalid_event, "an Invalid Event on the policy ConfigMap", 30)
        self.assertIn("replcas", ev[0].get("note", ""))
        cm["data"]["policy.yaml"] = bad.replace("replcas", "replicas")
        self.kubectl.apply(json.dumps(cm) + "\n")
        wait_for(lambda: self.probe_replicas() == 3, "the ConfigMap policy to govern", 30)
        self.apply_knative(SERVING_CORE)
        self.assertEqual(self.kubectl.json("-n", GOVERNED, "deployment", "controller")["spec"]["replicas"], 3)


if __name__ == "__main__":
    unittest.main()
