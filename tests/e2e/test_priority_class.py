"""A policy whose priorityClassName names a PriorityClass that does not exist (a typo) rolls nothing, on a real
API server with the scheduler, the deployment, replicaset and HPA controllers and fake kubelets (kubelet.py)
(docs/policy.md, "What the engine does", priorityClassName).

The API server's Priority admission refuses every pod naming a missing PriorityClass, so a Deployment rolled
onto such a name could create no new pod. The engine holds such a name back with a warning where it knows
the cluster's PriorityClasses (the server watches them while a policy names one; the reconciler and
`audit` list them).

- A, the typo: the chart (its defaults: reconcile interval 10m), its server, examples/priorityclass.yaml
  (`knative-control-plane`), examples/policy.yaml without its priorityClassName, Knative Serving v1.23.0 with
  its HPAs and Kourier, every Deployment rolled out and steady; then the policy edited to
  `priorityClassName: knative-contrl-plane`. For SETTLE_S (the reconciler's pass for the policy change and
  its settle pass 10 s later, with room), sampled every second: no Deployment's pod template names the typo,
  no Deployment rolls (its ReplicaSets and generation unchanged), every Deployment keeps its ready replicas,
  no ReplicaSet reports a refused pod (FailedCreate). The warning must be visible: the release applied again
  (`kubectl apply`) prints the engine's admission warning naming the typo. What the server's log, `audit`
  and the policy's status say is printed. Then the PriorityClass `knative-contrl-plane` is created, and for
  OBSERVE_S nothing else happens: whether the name reaches the pod templates without a trigger (the
  reconciler runs for a change of a policy, an HPA, a budget or config-leader-election, or every interval,
  not for a PriorityClass) is printed, then what a write (the release applied again) does. Observations,
  not assertions.
- B, the install under the typo, then the control: the same install with the policy naming the typo from the
  start: the release's apply prints the warning for every Deployment, none is created naming it, every one
  gets ready; then the policy edited to the right name `knative-control-plane`: every governed Deployment's
  template names it and rolls (a new ReplicaSet), and every Deployment is ready again.

Needs kube-scheduler and kube-controller-manager beside kube-apiserver and etcd in KUBEBUILDER_ASSETS; one
skip line otherwise. Timings are printed, never asserted (but the outcome deadlines).
"""

from __future__ import annotations

import json
import os
import re
import time
import unittest
from pathlib import Path

import cluster
from base import GOVERNED, ClusterCase
from install import ROOT
from simcluster import OwnPlaneCase

TYPO = "knative-contrl-plane"
RIGHT = "knative-control-plane"  # examples/priorityclass.yaml
POLICY = ROOT / "examples" / "policy.yaml"
PRIORITY_CLASS = ROOT / "examples" / "priorityclass.yaml"
CONTROLLERS = "deployment,replicaset,horizontalpodautoscaling,garbagecollector,namespace"
BINARIES = ("kube-apiserver", "etcd", "kube-scheduler", "kube-controller-manager")
SKIP_LINE = ("e2e priority class: skipped: KUBEBUILDER_ASSETS needs kube-apiserver, etcd, kube-scheduler and "
             "kube-controller-manager (docs/testing.md)")
SETTLE_S = 30  # after the policy's edit: the reconciler's change pass and its settle pass (10 s later), with room
STEADY_S = 12  # steady: the Deployments' ReplicaSets and generations the same this long
OBSERVE_S = 45  # after the PriorityClass of the typo's name is created
ROLL_S = 90  # B: every governed Deployment rolled onto the right name


def policy_text(priority_class: str | None) -> str:
    """examples/policy.yaml with its priorityClassName `priority_class` (None: without one)."""
    text = POLICY.read_text()
    line = re.compile(r"^  priorityClassName: .*$", re.M)
    if not line.search(text):
        raise AssertionError(f"{POLICY}: no priorityClassName line")
    return line.sub(f"  priorityClassName: {priority_class}" if priority_class else "", text)


def warnings(stderr: str) -> list[str]:
    return [ln.removeprefix("Warning: ").strip() for ln in stderr.splitlines() if ln.startswith("Warning:")]


class PriorityClassTypo(OwnPlaneCase, ClusterCase):
    """Each scenario on its own control plane with the scheduler, the controllers and fake kubelets."""

    @classmethod
    def setUpClass(cls):
        assets = os.environ.get("KUBEBUILDER_ASSETS")
        if not assets or not all((Path(assets) / b).exists() for b in BINARIES):
            raise unittest.SkipTest(SKIP_LINE)

    def setUp(self):
        self.start_own_plane(CONTROLLERS, True)

    # -- what the Deployments are doing --------------------------------------------------------
    def deployments(self) -> dict[str, dict]:
        return {d["metadata"]["name"]: d for d in self.kubectl.json("-n", GOVERNED, "deployments")["items"]}

    def replicasets(self) -> dict[str, list[str]]:
        """Per Deployment, the names of its ReplicaSets (one more: it rolled)."""
        out: dict[str, list[str]] = {}
        for rs in self.kubectl.json("-n", GOVERNED, "replicasets")["items"]:
            owner = next((o["name"] for o in rs["metadata"].get("ownerReferences") or [] if o["kind"] == "Deployment"), None)
            if owner:
                out.setdefault(owner, []).append(rs["metadata"]["name"])
        return {d: sorted(v) for d, v in out.items()}

    def snapshot(self) -> dict[str, dict]:
        rs = self.replicasets()
        out = {}
        for name, d in self.deployments().items():
            st = d.get("status") or {}
            out[name] = {"generation": d["metadata"]["generation"], "observed": st.get("observedGeneration"),
                         "replicas": d["spec"].get("replicas", 1), "ready": st.get("readyReplicas", 0),
                         "updated": st.get("updatedReplicas", 0),
                         "priorityClassName": d["spec"]["template"]["spec"].get("priorityClassName"),
                         "replicasets": rs.get(name, [])}
        return out

    @staticmethod
    def complete(snap: dict[str, dict]) -> bool:
        return all(s["observed"] == s["generation"] and s["ready"] == s["replicas"] == s["updated"] for s in snap.values())

    @staticmethod
    def shape(snap: dict[str, dict]) -> dict:
        return {n: (s["generation"], s["replicas"], s["replicasets"], s["priorityClassName"]) for n, s in snap.items()}

    def steady(self, limit_s: float = 180) -> dict[str, dict]:
        """Every Deployment rolled out and ready, its ReplicaSets and generation the same for STEADY_S."""
        deadline = time.monotonic() + limit_s
        last = None
        while time.monotonic() < deadline:
            snap = self.snapshot()
            if self.complete(snap) and last and self.shape(last[1]) == self.shape(snap) \
                    and time.monotonic() - last[0] >= STEADY_S:
                return snap
            if not (self.complete(snap) and last and self.shape(last[1]) == self.shape(snap)):
                last = (time.monotonic(), snap) if self.complete(snap) else None
            time.sleep(1)
        raise AssertionError(f"Deployments not steady within {limit_s}s: {self.snapshot()}")

    def refused_pods(self) -> list[str]:
        """The ReplicaSets' FailedCreate Events (a pod the API server refused)."""
        events = self.kubectl.json("-n", GOVERNED, "events")["items"]
        return [f"{e['involvedObject']['name']}: {e.get('message', '')[:200]}" for e in events if e.get("reason") == "FailedCreate"]

    def installed(self, priority_class: str | None = None):
        """Chart, server, examples/priorityclass.yaml, the example policy with `priority_class` (None: without
        a priorityClassName), Knative Serving v1.23.0 with its HPAs and Kourier (kubectl apply, its warnings
        kept), every Deployment steady."""
        self.install_chart()
        server = self.start_server()
        self.kubectl.apply(str(PRIORITY_CLASS))
        self.apply_policy(policy_text(priority_class))
        said = []
        for f in self.install.knative_files():
            r = self.kubectl.apply(str(f), check=False)
            said += warnings(r.stderr)
            if r.returncode != 0:  # the CRDs of a file may not be established at its first pass
                said += warnings(self.kubectl.apply(str(f)).stderr)
        return server, self.steady(), said

    def edit_policy(self, priority_class: str | None):
        """The policy edited; the kubectl apply and the time it returned."""
        r = self.kubectl.apply(policy_text(priority_class))
        return r, time.monotonic()

    def print_snapshot(self, label: str, snap: dict[str, dict]) -> None:
        print(f"  {label}:")
        for n, s in sorted(snap.items()):
            print(f"    {n:<24} generation {s['generation']:<3} replicas {s['replicas']} ready {s['ready']} "
                  f"priorityClassName {s['priorityClassName']!s:<22} replicasets {len(s['replicasets'])}")

    # -- A -------------------------------------------------------------------------------------
    def test_a_a_typo_rolls_nothing(self):
        server, s0, _ = self.installed()
        self.print_snapshot("steady, the policy without a priorityClassName", s0)
        r, t0 = self.edit_policy(TYPO)
        policy_warnings = warnings(r.stderr)
        named: dict[str, float] = {}  # Deployment -> seconds after the edit its template named the typo
        rolled: dict[str, float] = {}  # Deployment -> seconds after the edit it had a new ReplicaSet
        fewest = {n: s["ready"] for n, s in s0.items()}
        while time.monotonic() - t0 < SETTLE_S:
            snap = self.snapshot()
            at = round(time.monotonic() - t0, 1)
            for n, s in snap.items():
                if s["priorityClassName"] == TYPO:
                    named.setdefault(n, at)
                if s["replicasets"] != s0.get(n, {}).get("replicasets"):
                    rolled.setdefault(n, at)
                fewest[n] = min(fewest.get(n, s["ready"]), s["ready"])
            time.sleep(1)
        s1 = self.snapshot()
        refused = self.refused_pods()
        again = self.kubectl.run("apply", *sum((["-f", str(f)] for f in self.install.knative_files()), []), check=False)
        release_warnings = [w for w in warnings(again.stderr) if TYPO in w]
        time.sleep(3)
        s2 = self.snapshot()
        audit = self.audit()
        hap = self.kubectl.json("highavailabilitypolicy", "serving")
        log_lines = [ln for ln in server.log_text().splitlines() if TYPO in ln]

        print(f"\n  A: policy serving edited to priorityClassName {TYPO} (PriorityClass {RIGHT} exists, {TYPO} does not); "
              f"watched {SETTLE_S}s")
        print(f"  kubectl apply of the policy: exit {r.returncode}; warnings: {policy_warnings or 'none'}")
        print(f"  templates naming {TYPO}: {named or 'none'}; Deployments with a new ReplicaSet: {rolled or 'none'}")
        print(f"  fewest ready in the window: {fewest}; FailedCreate events: {refused or 'none'}")
        self.print_snapshot(f"{SETTLE_S}s after the edit", s1)
        print(f"  the release applied again: exit {again.returncode}; {len(release_warnings)} warnings naming {TYPO}:")
        for w in release_warnings:
            print(f"    {w}")
        print(f"  server log lines naming {TYPO}: {len(log_lines)}")
        for ln in log_lines[:8]:
            print(f"    {ln[:400]}")
        status = hap.get("status") or {}
        print(f"  policy status: conditions {json.dumps(status.get('conditions'))}")
        print(f"  policy status fields naming {TYPO}: "
              f"{[k for k, v in status.items() if TYPO in json.dumps(v)] or 'none'} (of {sorted(status)})")
        for k, v in status.items():
            text = json.dumps(v)
            if TYPO in text:
                i = text.index(TYPO)
                print(f"    status.{k}: ...{text[max(0, i - 200):i + 200]}...")
        print(f"  audit: exit {audit.returncode}; {len([ln for ln in audit.stdout.splitlines() if TYPO in ln])} lines naming {TYPO}:")
        for ln in (audit.stdout + audit.stderr).splitlines()[:12]:
            print(f"    {ln[:300]}")

        # C: the PriorityClass of the typo's name created; what happens without and then with a write.
        log_from = len(server.log_text())
        self.kubectl.apply(json.dumps({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                       "metadata": {"name": TYPO}, "value": 1000000}) + "\n")
        t1 = time.monotonic()
        reached: dict[str, float] = {}
        while time.monotonic() - t1 < OBSERVE_S:
            for n, s in self.snapshot().items():
                if s["priorityClassName"] == TYPO:
                    reached.setdefault(n, round(time.monotonic() - t1, 1))
            time.sleep(1)
        s3 = self.snapshot()
        window_log = server.log_text()[log_from:].splitlines()
        audit_created = self.audit()
        third = self.kubectl.run("apply", *sum((["-f", str(f)] for f in self.install.knative_files()), []), check=False)
        try:
            s4 = self.steady(120)
            steady_after_write = True
        except AssertionError:
            s4, steady_after_write = self.snapshot(), False
        audit_after = self.audit()
        print(f"\n  C: PriorityClass {TYPO} created; watched {OBSERVE_S}s without any other write")
        print(f"  templates naming {TYPO} meanwhile: {reached or 'none'} (seconds after the create)")
        messages: dict[str, int] = {}
        for ln in window_log:
            try:
                m = json.loads(ln).get("message", "?")
            except ValueError:
                m = ln[:80]
            messages[m] = messages.get(m, 0) + 1
        print(f"  server log meanwhile: {len(window_log)} lines {messages or ''}")
        for label, a in (("then", audit_created), ("after the write below", audit_after)):
            print(f"  audit {label}: exit {a.returncode}; lines naming {TYPO}:")
            for ln in a.stdout.splitlines():
                if TYPO in ln:
                    print(f"    {ln[:300]}")
        print(f"  the release applied again: exit {third.returncode}; warnings: "
              f"{[w for w in warnings(third.stderr) if 'priorityClassName' in w] or 'none'}")
        self.print_snapshot("after that write" + ("" if steady_after_write else " (NOT steady within 120s)"), s4)
        print(f"  Deployments rolled by the write: "
              f"{sorted(n for n, s in s4.items() if s['replicasets'] != s3[n]['replicasets']) or 'none'}")

        # the assertions of A (C is printed only)
        self.assertEqual(r.returncode, 0)
        for label, snap in ((f"{SETTLE_S}s after the edit", s1), ("after the release applied again", s2)):
            with self.subTest(when=label):
                self.assertEqual({n: s["priorityClassName"] for n, s in snap.items() if s["priorityClassName"] == TYPO}, {},
                                 f"{label}: pod templates naming the missing PriorityClass")
                self.assertEqual({n: s["replicasets"] for n, s in snap.items() if s["replicasets"] != s0[n]["replicasets"]}, {},
                                 f"{label}: Deployments rolled (new ReplicaSets)")
                self.assertEqual({n: (s0[n]["generation"], s["generation"]) for n, s in snap.items()
                                  if s["generation"] != s0[n]["generation"]}, {}, f"{label}: Deployment specs changed")
                self.assertEqual({n: (s["ready"], s["replicas"]) for n, s in snap.items() if s["ready"] != s["replicas"]}, {},
                                 f"{label}: Deployments not at their ready replicas")
        self.assertEqual(named, {}, "pod templates named the typo during the window")
        self.assertEqual(rolled, {}, "Deployments rolled during the window")
        self.assertEqual({n: (f, s0[n]["ready"]) for n, f in fewest.items() if n in s0 and f < s0[n]["ready"]}, {},
                         "ready replicas lost during the window")
        self.assertEqual([e for e in refused if "priority" in e.lower()], [], "pods refused for their PriorityClass")
        self.assertTrue(release_warnings, f"no admission warning naming {TYPO} when the release is applied again: "
                                          f"{again.stderr[-2000:]}")
        self.assertTrue(any("not written" in w for w in release_warnings), release_warnings)

    # -- B -------------------------------------------------------------------------------------
    def test_b_installed_under_the_typo_then_the_right_name_rolls_every_deployment(self):
        _server, s0, said = self.installed(TYPO)
        held = [w for w in said if TYPO in w and "not written" in w]
        print(f"\n  B: Knative applied under the policy with priorityClassName {TYPO} (missing): "
              f"{len(held)} warnings naming it, for {sorted({w.split(':', 1)[0] for w in held})}, e.g. {held[:1]}")
        self.print_snapshot("steady", s0)
        r, t0 = self.edit_policy(RIGHT)

        def named() -> bool:
            return all(s["priorityClassName"] == RIGHT for s in self.snapshot().values())

        all_named = cluster.wait_for_bool(named, ROLL_S, 1)
        named_s = time.monotonic() - t0
        try:
            s1 = self.steady(180)
            steady = True
        except AssertionError:
            s1, steady = self.snapshot(), False
        refused = self.refused_pods()
        print(f"  policy edited to priorityClassName {RIGHT} (exists): kubectl apply exit {r.returncode}, "
              f"warnings {warnings(r.stderr) or 'none'}")
        print(f"  every template named {RIGHT}: {all_named} ({named_s:.1f}s after the edit); steady again: {steady}")
        self.print_snapshot("after", s1)
        print(f"  FailedCreate events: {refused or 'none'}")
        self.assertEqual({n: s["priorityClassName"] for n, s in s0.items() if s["priorityClassName"]}, {},
                         "created naming a PriorityClass under the typo")
        warned = {w.split(":", 1)[0].removeprefix("deployment/") for w in held}
        self.assertEqual(sorted(warned), sorted(s0), f"Deployments created without the admission warning naming {TYPO}")
        for n in sorted(s0):  # every Deployment of knative-serving is Knative's, governed by the policy
            with self.subTest(deployment=n):
                self.assertEqual(s1[n]["priorityClassName"], RIGHT)
                self.assertGreater(len(s1[n]["replicasets"]), len(s0[n]["replicasets"]), f"{n} did not roll")
                self.assertEqual(s1[n]["ready"], s1[n]["replicas"], f"{n} not ready after its roll")


if __name__ == "__main__":
    unittest.main()
