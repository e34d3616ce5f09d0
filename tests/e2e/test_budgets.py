"""The PodDisruptionBudgets the reconciler creates, against a release's own budgets and a ResourceQuota, on a
real API server (docs/policy.md, "PodDisruptionBudgets that the reconciler creates"; docs/reconcile.md).

- A, same-name takeover: the chart, the example policy and Knative Serving v1.23.0, so the reconciler
  creates `controller-pdb`, `autoscaler-pdb` and `autoscaler-hpa-pdb` (`maxUnavailable`, annotation
  `knativeha.dev/created-for`). A release budget of the same name (`minAvailable: 80%`, as Knative ships its
  own) is then applied over each, one way each: `kubectl apply`, `--server-side`, `--server-side
  --force-conflicts`. Each apply must succeed and leave the release's budget, handed over (no created-for,
  no managed-by label, one budget field), still there 15 s later. Without the webhook in the path (its
  server stopped: the API server fails open) the same applies are refused with "minAvailable and
  maxUnavailable cannot be both set" (the outage limit the docs name); once the server is back, the apply
  goes through.
- B, two budgets over one pod: on a control plane with the scheduler, the deployment, replicaset and
  disruption controllers and fake kubelets (kubelet.py; pods Running and Ready, so the disruption controller
  computes the budgets' status and the Eviction API judges them), a release budget `autoscaler-release`
  (`app: autoscaler`, `maxUnavailable: 1`) beside the created `autoscaler-pdb`, with the chart's default
  `reconcile.interval` (10m): the seconds until the created one is deleted (polled every 0.2 s; it must go
  within 20 s), and an Eviction of an autoscaler pod every 0.5 s from the moment the second budget is
  created, its HTTP codes over time (500 "more than one PodDisruptionBudget" while both exist, then 201/429).
- C, quota: a ResourceQuota `count/poddisruptionbudgets.policy: "2"` in knative-serving (the controller
  manager's resourcequota controller computes its usage), Knative's two budgets in it, then the policy: no
  budget can be created, the policy is `Ready=False` with reason `QuotaExceeded` naming the quota's message,
  the forbidden gauge stays 0, and the other objects are brought in line (controller at 3 replicas, the
  activator's HPA at 5).

Each scenario starts its own control plane, with only the controllers and nodes it needs. Needs
KUBEBUILDER_ASSETS (a local control plane: B registers fake nodes); B also needs kube-scheduler and
kube-controller-manager, C kube-controller-manager (each skipped alone without them). One skip line without
KUBEBUILDER_ASSETS. Timings are printed, never asserted (but the outcome deadlines).
"""

from __future__ import annotations

import json
import os
import ssl
import threading
import time
import unittest
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from base import GOVERNED, ClusterCase, wait_for
from install import ROOT
from simcluster import OwnPlaneCase

CREATED_FOR = "knativeha.dev/created-for"
MANAGED_BY = "app.kubernetes.io/managed-by"
FIELDS = ("minAvailable", "maxUnavailable")
PRIORITY_CLASS = ROOT / "examples" / "priorityclass.yaml"
BOTH_SET = "cannot be both set"
FORBIDDEN = "knative_ha_webhook_reconcile_forbidden"
SKIP_LINE = ("e2e budgets: skipped: set KUBEBUILDER_ASSETS to a directory with kube-apiserver and etcd (and "
             "kube-scheduler and kube-controller-manager for the evictions and the quota; docs/testing.md)")

# Each scenario's control plane: the controller manager's controllers, and whether the scheduler and the
# fake kubelets run (the evictions need pods that run).
PLANES = {
    "test_a_same_name_release_budget_takes_over_a_created_one": ("namespace,garbagecollector", False),
    "test_a_without_the_webhook_the_same_name_apply_is_refused": ("namespace,garbagecollector", False),
    "test_b_a_release_budget_over_the_same_pods_gets_the_created_one_deleted":
        ("deployment,replicaset,disruption,garbagecollector,namespace", True),
    "test_c_a_used_up_quota_is_told_and_the_rest_brought_in_line": ("namespace,garbagecollector,resourcequota", False),
}
NEEDS = {
    "test_b_a_release_budget_over_the_same_pods_gets_the_created_one_deleted": ("kube-scheduler", "kube-controller-manager"),
    "test_c_a_used_up_quota_is_told_and_the_rest_brought_in_line": ("kube-controller-manager",),
}

# A: which created budget meets which way of applying the release's budget of the same name.
WAYS = (
    ("controller", "kubectl apply -f", ()),
    ("autoscaler", "kubectl apply --server-side -f", ("--server-side",)),
    ("autoscaler-hpa", "kubectl apply --server-side --force-conflicts -f", ("--server-side", "--force-conflicts")),
)
KEEP_S = 15  # A: how long the handed-over budget must stay
DELETE_S = 20  # B: the created budget must be gone by then
MEASURE_S = 60  # B: how long the deletion is waited for, to print the figure even when it is late
AFTER_S = 10  # B: evictions go on this long after the created budget is gone
EVICT_EVERY_S = 0.5
POLL_S = 0.2


def release_budget(deployment: str, budget: dict, name: str | None = None) -> str:
    """A PodDisruptionBudget as Knative's release manifests ship theirs (activator-pdb, webhook-pdb)."""
    return yaml.safe_dump({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name or f"{deployment}-pdb", "namespace": GOVERNED, "labels": {
            "app.kubernetes.io/component": deployment, "app.kubernetes.io/name": "knative-serving",
            "app.kubernetes.io/version": "1.23.0"}},
        "spec": {**budget, "selector": {"matchLabels": {"app": deployment}}}}, sort_keys=False)


def budget_fields(pdb: dict) -> dict:
    return {f: pdb["spec"][f] for f in FIELDS if pdb["spec"].get(f) is not None}


def warnings(stderr: str) -> list[str]:
    return [ln.removeprefix("Warning: ").strip() for ln in stderr.splitlines() if ln.startswith("Warning:")]


def errors(stderr: str) -> str:
    return " ".join(ln.strip() for ln in stderr.splitlines() if not ln.startswith("Warning:"))


def runs(codes: list[tuple[float, int, str]]) -> list[str]:
    """Consecutive answers of one code as one line: `from-to s: code xN (message)`."""
    out, i = [], 0
    while i < len(codes):
        j = i
        while j + 1 < len(codes) and codes[j + 1][1] == codes[i][1]:
            j += 1
        out.append(f"{codes[i][0]:5.1f}-{codes[j][0]:5.1f}s: {codes[i][1]} x{j - i + 1}"
                   + (f" ({codes[i][2]})" if codes[i][2] else ""))
        i = j + 1
    return out


class Budgets(OwnPlaneCase, ClusterCase):
    """Each scenario on its own control plane (PLANES); B with fake kubelets."""

    @classmethod
    def setUpClass(cls):
        if not os.environ.get("KUBEBUILDER_ASSETS"):
            raise unittest.SkipTest(SKIP_LINE)

    def setUp(self):
        assets = Path(os.environ["KUBEBUILDER_ASSETS"])
        missing = [b for b in NEEDS.get(self._testMethodName, ()) if not (assets / b).exists()]
        if missing:
            self.skipTest(f"e2e budgets: {self._testMethodName}: skipped: KUBEBUILDER_ASSETS has no {', '.join(missing)}")
        self.start_own_plane(*PLANES[self._testMethodName])

    # -- helpers -------------------------------------------------------------------------------
    def pdb(self, name: str) -> dict | None:
        r = self.kubectl.run("-n", GOVERNED, "get", "pdb", name, "-o", "json", check=False)
        if r.returncode != 0:
            if "NotFound" in r.stderr or "not found" in r.stderr:
                return None
            raise AssertionError(f"kubectl get pdb {name}: {r.stderr.strip()}")
        return json.loads(r.stdout)

    def created(self, deployment: str) -> dict | None:
        """`<deployment>-pdb` when it is the one the reconciler created for `deployment`."""
        pdb = self.pdb(f"{deployment}-pdb")
        annotations = (pdb or {}).get("metadata", {}).get("annotations") or {}
        return pdb if annotations.get(CREATED_FOR) == deployment else None

    def wait_created(self, *deployments: str, limit_s: float = 90) -> dict[str, dict]:
        return {d: wait_for(lambda d=d: self.created(d), f"the reconciler to create {d}-pdb", limit_s)
                for d in deployments}

    def governed(self, server_env: dict | None = None):
        """The chart (its defaults), its server, examples/priorityclass.yaml, the example policy Ready,
        Knative Serving v1.23.0 with its HPAs and Kourier."""
        self.install_chart()
        server = self.start_server(**(server_env or {}))
        self.kubectl.apply(str(PRIORITY_CLASS))
        self.install.govern()
        return server

    def describe(self, pdb: dict | None) -> str:
        if pdb is None:
            return "GONE"
        meta = pdb["metadata"]
        marks = ["created-for"] if CREATED_FOR in (meta.get("annotations") or {}) else []
        marks += ["managed-by"] if MANAGED_BY in (meta.get("labels") or {}) else []
        return f"{json.dumps(budget_fields(pdb))}{' +' + ','.join(marks) if marks else ''}"

    # -- A -------------------------------------------------------------------------------------
    def test_a_same_name_release_budget_takes_over_a_created_one(self):
        self.governed()
        before = self.wait_created(*(d for d, _, _ in WAYS))
        rows = []
        for deployment, way, extra in WAYS:
            name = f"{deployment}-pdb"
            r = self.kubectl.apply(release_budget(deployment, {"minAvailable": "80%"}), *extra, check=False)
            after = self.pdb(name)
            rows.append({"deployment": deployment, "name": name, "way": way, "rc": r.returncode,
                         "error": errors(r.stderr), "warnings": warnings(r.stderr), "created": before[deployment],
                         "after": after, "applied": time.monotonic()})
        time.sleep(max(0.0, KEEP_S - (time.monotonic() - rows[-1]["applied"])))
        for row in rows:
            row["later"] = self.pdb(row["name"])
        audit = self.audit()

        print(f"\n  A: a release budget of the same name ({{minAvailable: 80%}}) applied over each created budget")
        print(f"  {'way':<50} {'budget':<20} {'exit':<5} {'created':<34} {'right after':<34} after {KEEP_S}s")
        for row in rows:
            print(f"  {row['way']:<50} {row['name']:<20} {row['rc']:<5} {self.describe(row['created']):<34} "
                  f"{self.describe(row['after']):<34} {self.describe(row['later'])}"
                  + (f"  same uid: {row['later']['metadata']['uid'] == row['created']['metadata']['uid']}"
                     if row["later"] else ""))
            for w in row["warnings"]:
                print(f"      warning: {w}")
            if row["rc"]:
                print(f"      refused: {row['error']}")
        print(f"  audit after: exit {audit.returncode}\n" + "".join(f"    {ln}\n" for ln in audit.stdout.splitlines()))

        for row in rows:
            with self.subTest(way=row["way"], budget=row["name"]):
                self.assertEqual(row["rc"], 0, f"{row['way']} of {row['name']} over the created budget: {row['error']}")
                for when, pdb in (("right after the apply", row["after"]), (f"{KEEP_S}s later", row["later"])):
                    self.assertIsNotNone(pdb, f"{row['name']} deleted ({when})")
                    meta = pdb["metadata"]
                    self.assertNotIn(CREATED_FOR, meta.get("annotations") or {}, f"{row['name']} still marked created ({when})")
                    self.assertNotIn(MANAGED_BY, meta.get("labels") or {}, f"{row['name']} still labelled ours ({when})")
                    self.assertEqual(len(budget_fields(pdb)), 1, f"{row['name']} {when}: {pdb['spec']}")
                    self.assertIn("minAvailable", budget_fields(pdb), f"the release's field stays ({when}): {pdb['spec']}")
                self.assertEqual(row["later"]["metadata"]["uid"], row["created"]["metadata"]["uid"],
                                 f"{row['name']} was deleted and made again")

    def test_a_without_the_webhook_the_same_name_apply_is_refused(self):
        """The outage limit docs/policy.md names: with no webhook in the path the release's apply over a
        created budget of the same name is refused by the API server; once the webhook is back it goes."""
        self.FAIL_OPEN_EXPECTED = True  # the server is stopped on purpose: the API server fails open
        server = self.governed()
        created = self.wait_created("controller")["controller"]
        server.stop()
        text = release_budget("controller", {"minAvailable": "80%"})
        rows = []
        for _, way, extra in WAYS:
            r = self.kubectl.apply(text, *extra, check=False)
            rows.append((way, r.returncode, errors(r.stderr)))
        still = self.pdb("controller-pdb")
        self.start_server("webhook-1")
        again = self.kubectl.apply(text, check=False)
        after = self.pdb("controller-pdb")
        print("\n  A (webhook stopped): the release's controller-pdb {minAvailable: 80%} over the created one")
        for way, rc, err in rows:
            print(f"  {way:<50} exit {rc}: {err}")
        print(f"  stored meanwhile: {self.describe(still)}")
        print(f"  webhook back, kubectl apply -f: exit {again.returncode} {errors(again.stderr)}; stored: {self.describe(after)}")
        for way, rc, err in rows:
            with self.subTest(way=way):
                self.assertNotEqual(rc, 0, f"{way} went through with the webhook down")
                self.assertIn(BOTH_SET, err)
        self.assertEqual(still["metadata"]["uid"], created["metadata"]["uid"])
        self.assertEqual(still["metadata"]["annotations"].get(CREATED_FOR), "controller", "the refused applies changed it")
        self.assertEqual(again.returncode, 0, f"apply again once the webhook is back: {errors(again.stderr)}")
        self.assertNotIn(CREATED_FOR, after["metadata"].get("annotations") or {})
        self.assertEqual(len(budget_fields(after)), 1, after["spec"])

    # -- B -------------------------------------------------------------------------------------
    def autoscaler_pods(self) -> list[dict]:
        """The autoscaler's pods that run (Running and Ready, not terminating), by name."""
        pods = self.kubectl.json("-n", GOVERNED, "pods", "-l", "app=autoscaler")["items"]
        out = []
        for p in pods:
            conds = {c["type"]: c["status"] for c in p.get("status", {}).get("conditions", [])}
            if p.get("status", {}).get("phase") == "Running" and conds.get("Ready") == "True" \
                    and not p["metadata"].get("deletionTimestamp"):
                out.append(p)
        return sorted(out, key=lambda p: p["metadata"]["name"])

    def evict(self, pod: dict) -> tuple[int, str]:
        """POST an Eviction of `pod`: the HTTP code and the answer's message."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns},
                "deleteOptions": {"preconditions": {"uid": pod["metadata"]["uid"]}}}
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        req = urllib.request.Request(f"{self.api.server}/api/v1/namespaces/{ns}/pods/{name}/eviction",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "Accept": "application/json",
                                              "Authorization": f"Bearer {self.api.admin_token}"})
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=20) as r:
                return r.status, ""
        except urllib.error.HTTPError as e:
            with e:
                text = e.read().decode(errors="replace")
            try:
                return e.code, json.loads(text).get("message", "")
            except ValueError:
                return e.code, text[:200]

    def test_b_a_release_budget_over_the_same_pods_gets_the_created_one_deleted(self):
        server = self.governed()
        interval = server.env.get("KHW_RECONCILE_INTERVAL")
        self.assertEqual(interval, "10m", "the chart's default reconcile interval")
        created = self.wait_created("autoscaler")["autoscaler"]

        def settled() -> dict | None:
            pdb = self.created("autoscaler")
            if pdb is None or len(self.autoscaler_pods()) != 3:
                return None
            st = pdb.get("status") or {}
            ok = (st.get("observedGeneration") == pdb["metadata"]["generation"] and st.get("currentHealthy") == 3
                  and st.get("disruptionsAllowed", 0) >= 1)
            return pdb if ok else None

        pdb = wait_for(settled, "3 autoscaler pods Ready and autoscaler-pdb allowing a disruption", 180, every_s=1)
        baseline = {k: pdb["status"].get(k) for k in ("expectedPods", "currentHealthy", "desiredHealthy", "disruptionsAllowed")}

        codes: list[tuple[float, int, str]] = []
        halt = threading.Event()
        t0 = time.monotonic()

        def evictions():
            while not halt.is_set():
                tick = time.monotonic()
                try:
                    pods = self.autoscaler_pods()
                    if pods:
                        code, message = self.evict(pods[0])
                        codes.append((round(tick - t0, 2), code, message[:90] if code != 201 else ""))
                except (AssertionError, OSError, ValueError) as e:  # kubectl or the connection: a gap, printed
                    codes.append((round(tick - t0, 2), 0, str(e)[:90]))
                halt.wait(max(0.0, EVICT_EVERY_S - (time.monotonic() - tick)))

        thread = threading.Thread(target=evictions, daemon=True, name="evictions")
        thread.start()
        gone_at = None
        try:
            r = self.kubectl.apply(release_budget("autoscaler", {"maxUnavailable": 1}, name="autoscaler-release"))
            made_at = time.monotonic() - t0
            while time.monotonic() - t0 < MEASURE_S:
                if self.pdb("autoscaler-pdb") is None:
                    gone_at = time.monotonic() - t0
                    break
                time.sleep(POLL_S)
            end = time.monotonic() + (AFTER_S if gone_at is not None else 0)
            while time.monotonic() < end:
                time.sleep(POLL_S)
        finally:
            halt.set()
            thread.join(30)
        release = self.pdb("autoscaler-release")
        log = self.install.servers[0].log_text()
        deleted_lines = [ln for ln in log.splitlines() if "autoscaler-pdb" in ln]

        print(f"\n  B: autoscaler-release {{maxUnavailable: 1}} beside the created autoscaler-pdb "
              f"(reconcile interval {interval}); t=0 when the apply started")
        print(f"  created autoscaler-pdb before: {self.describe(created)} status {baseline}")
        st = (release or {}).get("status") or {}
        print(f"  {'release budget stored (apply returned)':<46} {made_at:6.2f}s  {self.describe(release)}; at the end "
              f"allows {st.get('disruptionsAllowed')} of {st.get('expectedPods')} ({st.get('currentHealthy')} healthy)"
              + "".join(f"\n      warning: {w}" for w in warnings(r.stderr)))
        print(f"  {'created autoscaler-pdb seen gone':<46} "
              + (f"{gone_at:6.2f}s ({gone_at - made_at:.2f}s after the apply returned)" if gone_at is not None
                 else f"NOT within {MEASURE_S}s"))
        print(f"  Evictions of an autoscaler pod every {EVICT_EVERY_S}s ({len(codes)} sent), by answer over time:")
        for ln in runs(codes):
            print(f"    {ln}")
        for ln in deleted_lines[-5:]:
            print(f"  server log: {ln[:300]}")

        self.assertIsNotNone(release, "the release's budget stays")
        self.assertIsNotNone(gone_at, f"the created autoscaler-pdb still exists {MEASURE_S}s after a release budget "
                                      f"selecting its pods (log {self.install.servers[0].log})")
        self.assertLessEqual(gone_at - made_at, DELETE_S, f"the created autoscaler-pdb went {gone_at - made_at:.1f}s "
                                                          "after the release budget, not within 20s")
        late = [c for c in codes if c[0] > gone_at + 1.0]
        self.assertTrue(late, "no Eviction sent after the created budget went")
        self.assertEqual([c for c in late if c[1] not in (201, 429)], [],
                         "after the created budget went, every Eviction is judged by the one budget left (201 or 429)")

    # -- C -------------------------------------------------------------------------------------
    def test_c_a_used_up_quota_is_told_and_the_rest_brought_in_line(self):
        self.install_chart()
        server = self.start_server()
        quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "pdbs", "namespace": GOVERNED},
                 "spec": {"hard": {"count/poddisruptionbudgets.policy": "2"}}}
        self.kubectl.apply(json.dumps(quota) + "\n")

        def used() -> dict:
            return self.kubectl.json("-n", GOVERNED, "resourcequota", "pdbs").get("status", {}).get("used") or {}

        wait_for(lambda: "count/poddisruptionbudgets.policy" in used(), "the quota's usage computed", 60)
        self.apply_knative()
        shipped = sorted(p["metadata"]["name"] for p in self.kubectl.json("-n", GOVERNED, "pdb")["items"])
        t = time.monotonic()
        self.kubectl.apply(str(ROOT / "examples" / "policy.yaml"))
        cond = self.wait_policy("serving", "False", "QuotaExceeded", limit_s=90)
        told = time.monotonic() - t

        def replicas() -> int:
            return self.kubectl.json("-n", GOVERNED, "deployment", "controller")["spec"]["replicas"]

        wait_for(lambda: replicas() == 3, "the controller at 3 replicas despite the quota", 60)
        wait_for(lambda: self.kubectl.json("-n", GOVERNED, "hpa", "activator")["spec"]["minReplicas"] == 5,
                 "the activator's HPA at 5", 60)
        in_line = time.monotonic() - t
        budgets = sorted(p["metadata"]["name"] for p in self.kubectl.json("-n", GOVERNED, "pdb")["items"])
        forbidden = server.metric(FORBIDDEN, target_namespace=GOVERNED)
        hap = self.kubectl.json("highavailabilitypolicy", "serving")
        audit = self.audit()
        print(f"\n  C: ResourceQuota count/poddisruptionbudgets.policy=2 in {GOVERNED}, Knative's budgets {shipped}, "
              f"then the policy")
        print(f"  Ready={cond['status']} reason={cond['reason']} {told:.1f}s after the policy's apply")
        print(f"  message: {cond['message']}")
        print(f"  controller replicas 3 and activator HPA 5 by {in_line:.1f}s; budgets {budgets}; quota used {used()}; "
              f"{FORBIDDEN}={forbidden}; status.governedObjects={hap.get('status', {}).get('governedObjects')}")
        print(f"  audit: exit {audit.returncode}\n" + "".join(f"    {ln}\n" for ln in audit.stdout.splitlines()))
        self.assertIn("exceeded quota", cond["message"])
        self.assertEqual(budgets, shipped, "no budget beyond the quota")
        self.assertEqual(forbidden, 0, "a quota is not an RBAC refusal")
        # The message is read in `kubectl describe` and `kubectl get -o yaml`: one space between words, as
        # the ReconcilerForbidden message has.
        self.assertNotRegex(cond["message"], r"\S {2,}\S", "a run of spaces inside the QuotaExceeded message")


if __name__ == "__main__":
    unittest.main()
