"""A governed namespace deleted and re-created, on a real API server: under the chart's rbac.scope=namespaced,
and under knativeOperator=true (what an Operator reinstall does to the namespace).

The chart's Role and RoleBinding live in the governed namespace, so deleting the namespace deletes them:
the reconciler's requests there are refused (403). The policy must say so (Ready=False, reason
ReconcilerForbidden, the fix in the message), the gauge knative_ha_webhook_reconcile_forbidden must be 1,
and both must come back by themselves once `helm upgrade` re-creates the Roles. With knativeOperator=true the
rights are cluster-wide: the re-created namespace's objects come back in line, the created budgets with them,
without a `helm upgrade`.
"""

from __future__ import annotations

import time
import unittest

from base import GOVERNED, ClusterCase, wait_for
from install import CHART, NAMESPACE, RELEASE, SERVING_CORE

FORBIDDEN = "knative_ha_webhook_reconcile_forbidden"


class Rights(ClusterCase):
    def chart_roles(self, kinds: str = "roles,rolebindings") -> list[str]:
        """The chart's Roles/RoleBindings in the governed namespace (Knative ships its own there)."""
        items = self.kubectl.json("-n", GOVERNED, kinds, "-l", f"app.kubernetes.io/instance={RELEASE}")["items"]
        return [f"{i['kind']}/{i['metadata']['name']}" for i in items]

    def forbidden(self, server) -> float:
        return server.metric(FORBIDDEN, target_namespace=GOVERNED)

    def test_a_recreated_namespace_refuses_the_reconciler_until_helm_upgrade(self):
        self.install_chart("rbac.scope=namespaced", "reconcile.interval=3s")
        server = self.start_server()
        self.apply_policy()
        self.wait_policy("serving", "True", "Valid")
        self.apply_knative(SERVING_CORE)
        wait_for(lambda: self.audit().returncode == 0, "Knative Serving in line", 60)
        self.assertEqual(self.forbidden(server), 0)
        roles = self.chart_roles()
        self.assertTrue(any(r.startswith("Role/") for r in roles), roles)

        # The namespace deleted (its Roles with it) and re-created by the release's apply.
        start = time.monotonic()
        self.kubectl.run("delete", "namespace", GOVERNED, "--wait=true", "--timeout=120s", timeout=150)
        deleted = time.monotonic() - start
        self.apply_knative(SERVING_CORE)
        recreated = time.monotonic() - start
        self.assertEqual(self.chart_roles(), [], "the chart's Role and RoleBinding went with the namespace")
        cond = self.wait_policy("serving", "False", "ReconcilerForbidden", limit_s=90)
        not_ready = time.monotonic() - start
        message = cond["message"]
        for part in (f"in namespace {GOVERNED} (403 Forbidden)", "helm upgrade", "rbac.scope=cluster"):
            self.assertIn(part, message)
        wait_for(lambda: self.forbidden(server) == 1, f"{FORBIDDEN} = 1", 30)

        # The chart's fix: helm upgrade re-creates the Roles; the next pass goes through.
        upgrade = time.monotonic()
        self.install.helm("upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, *self.install.post_renderer(),
                          "--reuse-values")
        self.assertEqual(self.chart_roles(), roles, "helm upgrade re-created them")
        self.wait_policy("serving", "True", "Valid", limit_s=90)
        ready = time.monotonic() - upgrade
        wait_for(lambda: self.forbidden(server) == 0, f"{FORBIDDEN} = 0", 30)
        metric_back = time.monotonic() - upgrade
        wait_for(lambda: self.audit().returncode == 0, "the re-created objects in line", 60)
        print(f"\n  namespace deleted in {deleted:.1f}s, re-created at {recreated:.1f}s; "
              f"Ready=False/ReconcilerForbidden at {not_ready:.1f}s after the delete started; "
              f"after helm upgrade: Ready=True in {ready:.1f}s, {FORBIDDEN}=0 in {metric_back:.1f}s\n"
              f"  message: {message}")

    def test_with_knative_operator_a_recreated_namespace_gets_its_budgets_back_by_itself(self):
        self.install_chart("knativeOperator=true", "reconcile.interval=3s")
        self.assertEqual(self.chart_roles(), [], "nothing rendered into the governed namespace")
        server = self.start_server()
        self.apply_policy()
        self.wait_policy("serving", "True", "Valid")
        self.apply_knative(SERVING_CORE)
        created = ("autoscaler-pdb", "controller-pdb")

        def budgets() -> list[str]:
            names = [i["metadata"]["name"] for i in self.kubectl.json("-n", GOVERNED, "pdb")["items"]]
            return sorted(n for n in names if n in created)

        wait_for(lambda: budgets() == sorted(created), "the created budgets", 60)
        wait_for(lambda: self.audit().returncode == 0, "Knative Serving in line", 60)

        start = time.monotonic()
        self.kubectl.run("delete", "namespace", GOVERNED, "--wait=true", "--timeout=120s", timeout=150)
        self.assertEqual(budgets(), [], "the budgets went with the namespace")
        self.apply_knative(SERVING_CORE)
        wait_for(lambda: budgets() == sorted(created), "the created budgets, back without helm upgrade", 60)
        back = time.monotonic() - start
        wait_for(lambda: self.audit().returncode == 0, "the re-created objects in line", 60)
        self.assertEqual(self.forbidden(server), 0)
        cond = self.wait_policy("serving", "True", "Valid")
        print(f"\n  knativeOperator=true: namespace deleted and re-created; created budgets back {back:.1f}s "
              f"after the delete started, no helm upgrade; Ready={cond['status']}/{cond['reason']}")


if __name__ == "__main__":
    unittest.main()


class BoundWrites(ClusterCase):
    """rbac.boundWrites (the default): a ValidatingAdmissionPolicy lets the webhook's own ServiceAccount change
    only the Deployment fields the engine manages. Its token, stolen, cannot change an image, a command, the
    environment or the pods' ServiceAccount of Knative's Deployments; the reconciler still brings everything
    in line."""

    def test_the_webhooks_token_is_refused_an_image_change_and_the_reconciler_still_works(self):
        from cluster import Kubectl

        self.install_chart("reconcile.interval=3s")
        kinds = {d["kind"] for d in self.install.manifest()}
        self.assertIn("ValidatingAdmissionPolicy", kinds, "rendered where the API server serves it")
        self.start_server()
        self.apply_knative()
        self.apply_policy()
        wait_for(lambda: self.audit().returncode == 0, "the reconciler brought Knative in line under the policy", 90)
        stolen = Kubectl(self.install.service_account_kubeconfig())
        container = "/spec/template/spec/containers/0"
        refused = {
            "image": [{"op": "replace", "path": f"{container}/image", "value": "registry.test/evil:1"}],
            "command": [{"op": "add", "path": f"{container}/command", "value": ["/bin/sh", "-c", "id"]}],
            "env": [{"op": "add", "path": f"{container}/env/-", "value": {"name": "X", "value": "1"}}],
            "serviceAccountName": [{"op": "replace", "path": "/spec/template/spec/serviceAccountName",
                                    "value": "default"}],
        }
        import json as _json
        for what, patch in refused.items():
            r = stolen.run("-n", GOVERNED, "patch", "deployment", "controller", "--type=json",
                           "-p", _json.dumps(patch), check=False)
            self.assertNotEqual(r.returncode, 0, f"{what}: the webhook's token changed it")
            self.assertIn("ValidatingAdmissionPolicy", r.stderr, f"{what}: {r.stderr}")
            print(f"\n  {what}: refused: {r.stderr.strip()[:200]}")
        # What the engine manages still goes through with the same token.
        r = stolen.run("-n", GOVERNED, "patch", "deployment", "controller", "--type=merge",
                       "-p", '{"spec": {"replicas": 4}}', check=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        # ... and the reconciler, as that identity, puts the policy's 3 back.
        wait_for(lambda: self.kubectl.json("-n", GOVERNED, "deployment", "controller")["spec"]["replicas"] == 3,
                 "the reconciler's write (replicas 4 -> 3) admitted", 60)
        image = self.kubectl.json("-n", GOVERNED, "deployment", "controller")["spec"]["template"]["spec"]["containers"][0]["image"]
        self.assertNotIn("evil", image)

    def test_without_it_the_webhooks_token_changes_an_image(self):
        """What rbac.boundWrites=false leaves: RBAC alone lets the same token run another image under
        Knative's controller ServiceAccount (the threat the policy closes)."""
        import json as _json

        from cluster import Kubectl

        self.install_chart("rbac.boundWrites=false")
        self.assertNotIn("ValidatingAdmissionPolicy", {d["kind"] for d in self.install.manifest()})
        self.start_server()
        self.apply_knative()
        stolen = Kubectl(self.install.service_account_kubeconfig())
        patch = [{"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "registry.test/evil:1"}]
        r = stolen.run("-n", GOVERNED, "patch", "deployment", "controller", "--type=json", "-p", _json.dumps(patch),
                       check=False)
        self.assertEqual(r.returncode, 0, r.stderr)
