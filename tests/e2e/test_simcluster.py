"""What the policy's objects do in a running (simulated) cluster: drains, a zone loss, the 1.20 -> 1.23
upgrade, an HPA scale-out beyond the zones, rollouts on the zones left and a burst of higher-priority
pods, each run for Knative as shipped and under policies, in the same run (simcluster.py).

KHW_SIM_VARIANTS picks the variants (comma-separated; default `shipped,recommended`; every one:
`shipped,recommended,spread-strict,preferred-only,required-zone`). Needs kube-scheduler and kube-controller-manager
beside kube-apiserver and etcd in KUBEBUILDER_ASSETS; one skip line otherwise.

With KHW_E2E_KUBECONFIG (a kind or k3d cluster running Knative's real images; .github/workflows/e2e-kind.yml)
the variants run in that cluster instead, one after another, each removing Knative before and after it
(only namespaces it installed: they carry the annotation simcluster.OWNED; a foreign Knative skips the test):
install 1.20, the upgrade to 1.23, the drain of an activator's node, the HPA scale-out to 5 and a
rollout restart of every Deployment (the preemption and zone-loss steps need the fake kubelets). The
cluster is the test's alone: Knative Serving, Kourier and their CRDs are deleted from it.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
import time
import unittest
from pathlib import Path

import simcluster
from base import binary
from simcluster import ROOT, SimCluster

SERVING = "knative-serving"
KOURIER = "kourier-system"

# The placement parts of each variant; every policy variant also sets 3 replicas, 3 buckets and
# PodDisruptionBudgets of maxUnavailable 1.
PLACEMENT = {
    # examples/policy.yaml's placement: Preferred hostname anti-affinity, zones by a spread constraint
    # (the engine adds matchLabelKeys [pod-template-hash] and nodeTaintsPolicy Honor), and a
    # PriorityClass above ordinary workloads.
    "recommended": """  podAntiAffinity: {type: Preferred, topologyKey: kubernetes.io/hostname}
  topologySpreadConstraints:
    - {topologyKey: topology.kubernetes.io/zone, maxSkew: 1, whenUnsatisfiable: ScheduleAnyway}
  priorityClassName: knative-control-plane
""",
    # The same with DoNotSchedule: zones kept apart strictly (a node without the zone label takes none
    # of these pods).
    "spread-strict": """  podAntiAffinity: {type: Preferred, topologyKey: kubernetes.io/hostname}
  topologySpreadConstraints:
    - {topologyKey: topology.kubernetes.io/zone, maxSkew: 1, whenUnsatisfiable: DoNotSchedule}
  priorityClassName: knative-control-plane
""",
    "preferred-only": "  podAntiAffinity: {type: Preferred, topologyKey: kubernetes.io/hostname}\n",
    "required-zone": "  podAntiAffinity: {type: Required, topologyKey: topology.kubernetes.io/zone}\n",
}
VARIANTS = ["shipped", *PLACEMENT]


def policy_files(variant: str, workdir: str) -> list[str]:
    if variant == "shipped":
        return []
    out = []
    for ns in (SERVING, KOURIER):
        leader = "  leaderElection: {enabled: true, buckets: 3}\n" if ns == SERVING else ""
        text = (f"apiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\nmetadata: {{name: {ns}}}\n"
                f"spec:\n  targetNamespace: {ns}\n  replicas: 3\n{leader}"
                f"  podDisruptionBudget: {{maxUnavailable: 1}}\n{PLACEMENT[variant]}")
        path = Path(workdir) / f"{variant}-{ns}.yaml"
        path.write_text(text)
        out.append(str(path))
    return out


# The leader-elected Deployments of the variants' releases (as the engine lists them).
LEADER_ELECTED = ("controller", "autoscaler", "autoscaler-hpa", "webhook", "net-kourier-controller")
HASH = "knativeha.dev/leader-election-hash"
START_S = 3.0  # the fake kubelets' pod start-up in the bucket-change test


def with_buckets(files: list[str], buckets: int, workdir: str) -> list[str]:
    """The policy files again, with `buckets` instead of 3."""
    out = []
    for f in files:
        path = Path(workdir) / f"buckets-{buckets}-{Path(f).name}"
        path.write_text(Path(f).read_text().replace("buckets: 3", f"buckets: {buckets}"))
        out.append(str(path))
    return out


class Shapes(threading.Thread):
    """Samples the pods of the leader-elected Deployments five times a second: per Deployment, when
    pods of the old and the new settings hash were Ready together (each set leads every key under its
    own bucket shape), and how many new pods existed when the first of them turned Ready."""

    def __init__(self, sim: SimCluster, old: dict[str, str]):
        super().__init__(daemon=True, name="shapes")
        self.sim, self.old = sim, old
        self.both: dict[str, list[float]] = {d: [] for d in old}
        self.started_together: dict[str, int] = {}
        self.halt = threading.Event()

    def sample(self) -> None:
        now = time.monotonic()
        ready: dict[str, dict[bool, int]] = {d: {True: 0, False: 0} for d in self.old}
        created: dict[str, int] = {d: 0 for d in self.old}
        for p in self.sim.api.get(f"/api/v1/namespaces/{SERVING}/pods")["items"]:
            owners = p["metadata"].get("ownerReferences") or [{}]
            d = owners[0].get("name", "").rsplit("-", 1)[0]
            if d not in self.old or p["metadata"].get("deletionTimestamp"):
                continue
            new = (p["metadata"].get("annotations") or {}).get(HASH) != self.old[d]
            created[d] += new
            conds = {c["type"]: c["status"] for c in p.get("status", {}).get("conditions", [])}
            ready[d][new] += conds.get("Ready") == "True"
        for d, r in ready.items():
            if r[True] and d not in self.started_together:
                self.started_together[d] = created[d]
            if r[True] and r[False]:
                self.both[d].append(now)

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                self.sample()
            except (AssertionError, OSError):
                pass
            self.halt.wait(0.2)

    def window(self, d: str) -> float:
        """Seconds from the first to the last sample with both shapes Ready (0: never together)."""
        t = self.both[d]
        return round(t[-1] - t[0] + 0.2, 1) if t else 0.0


def rolled(done: dict[str, bool]) -> dict[str, str]:
    return {k: ("rolled out" if ok else "ROLLOUT NOT DONE") for k, ok in done.items()}


class SimulatedCluster(unittest.TestCase):
    def setUp(self):
        self.kubeconfig = simcluster.real_kubeconfig()
        if self.kubeconfig:
            self.assertTrue(Path(self.kubeconfig).is_file(), f"KHW_E2E_KUBECONFIG={self.kubeconfig}: no such file")
            if not simcluster.takes_pods(self.kubeconfig):
                self.skipTest(simcluster.REAL_SKIP_LINE)
            foreign = simcluster.foreign_namespaces(self.kubeconfig)
            if foreign:  # a Knative this suite did not install: it would delete it
                self.skipTest(f"real cluster: skipped: {', '.join(foreign)} exist(s) without the "
                              f"{simcluster.OWNED} annotation: not installed by this suite, which would delete it")
        elif not simcluster.assets_ready():
            self.skipTest(simcluster.SKIP_LINE)
        self.title = "real cluster" if self.kubeconfig else "simulated cluster"
        parent = os.environ.get("KHW_E2E_WORKDIR") or None
        self.workdir = tempfile.mkdtemp(prefix="simcluster-", dir=parent)

    def run_variant(self, variant: str) -> dict[str, dict[str, simcluster.Row]]:
        print(f"\n== {self.title}, {variant}", flush=True)
        workdir = tempfile.mkdtemp(prefix=f"{variant}-", dir=self.workdir)
        sim = SimCluster(workdir, binary(), variant, policy_files(variant, workdir), self.kubeconfig).start()
        try:
            if sim.real:
                print(f"  API server {sim.plane.server}; nodes: {sim.describe_nodes()}", flush=True)
            if variant != "shipped" and "priorityClassName" in PLACEMENT[variant]:
                sim.kubectl.apply(str(ROOT / "examples" / "priorityclass.yaml"))
            steps: dict[str, list[simcluster.Row]] = {}
            limits = sim.limits

            def install():
                sim.apply_release("1.20")
                return rolled(sim.rollout_all(limits.install))

            steps["install 1.20"] = sim.step("install 1.20", install)
            placement = sim.zones_by_component()
            print(f"  placement (pods per zone {sim.zone_names()}): {placement}", flush=True)
            steps["upgrade to 1.23"] = sim.step("upgrade to 1.23", lambda: (sim.apply_release("1.23"),
                                                                           rolled(sim.rollout_all(limits.rollout)))[1])
            steps["drain"] = sim.step("drain", lambda: sim.drain(sim.node_of(SERVING, "activator")), settle_s=2)
            sim.wait_full(limits.full)
            # The controller ships no budget: every pod of it, evicted at once.
            steps["evict every controller pod"] = sim.step("evict every controller pod",
                                                           lambda: sim.evict_all(SERVING, "controller"), settle_s=2)
            sim.wait_full(limits.full)
            steps["HPA scale-out to 5"] = sim.step("HPA scale-out to 5", lambda: sim.scale_hpa(SERVING, "activator", 5))
            if sim.real:  # no preemption or zone loss: they need the fake kubelets
                def rollout_restart():
                    for ns in (SERVING, KOURIER):
                        sim.kubectl.run("-n", ns, "rollout", "restart", "deployment")
                    return rolled(sim.rollout_all(limits.rollout))

                steps["rollout restart"] = sim.step("rollout restart", rollout_restart)
                placement = sim.zones_by_component()
                print(f"  placement after the rollout (pods per zone {sim.zone_names()}): {placement}", flush=True)
                return {step: {r.component: r for r in rows} for step, rows in steps.items()}
            steps["preemption"] = sim.step("preemption", lambda: sim.burst(6, "3800m"))
            sim.wait_full(90)
            print(f"  placement before the zone loss: {sim.zones_by_component()}", flush=True)

            def zone_loss():
                sim.lose_zone("zone-a")
                return "back to full count" if sim.wait_full(90) else "NOT back to full count in 90s"

            steps["zone loss"] = sim.step("zone loss", zone_loss)

            def rollout_left():
                for ns in (SERVING, KOURIER):
                    sim.kubectl.run("-n", ns, "rollout", "restart", "deployment")
                return rolled(sim.rollout_all(150))

            steps["rollout on zones left"] = sim.step("rollout on zones left", rollout_left)
            return {step: {r.component: r for r in rows} for step, rows in steps.items()}
        finally:
            if sim.kubelets is not None:
                print(f"  fake kubelet errors: {len(sim.kubelets.errors)}", flush=True)
            sim.stop()

    def test_bucket_change_window(self):
        """A bucket change (3 -> 5) restarts the leader-elected Deployments; each pod starts START_S
        seconds after it is bound. Until a Deployment's old pods stop, they and its new pods each lead
        every key. Every new pod starts at once (maxSurge 100%): each Deployment's new pods all exist
        when the first of them turns Ready, and the window is about one pod start."""
        if self.kubeconfig:
            self.skipTest("real cluster: skipped: the bucket-change window needs the fake kubelets' start-up delay")
        print(f"\n== {self.title}, bucket change", flush=True)
        workdir = tempfile.mkdtemp(prefix="buckets-", dir=self.workdir)
        first = policy_files("recommended", workdir)
        sim = SimCluster(workdir, binary(), "bucket change", first, start_s=START_S).start()
        try:
            sim.kubectl.apply(str(ROOT / "examples" / "priorityclass.yaml"))
            sim.apply_release("1.23")
            self.assertTrue(all(sim.rollout_all(sim.limits.install).values()), "install")
            deployments = sim.monitor.deployments()
            old = {d: deployments[f"{SERVING}/{d}"]["spec"]["template"]["metadata"]["annotations"][HASH]
                   for d in LEADER_ELECTED if f"{SERVING}/{d}" in deployments}
            replicas = {d: deployments[f"{SERVING}/{d}"]["spec"].get("replicas", 1) for d in old}
            shapes = Shapes(sim, old)
            shapes.start()
            sim.policies = with_buckets(first, 5, workdir)
            started = time.monotonic()
            sim.apply_release("1.23")
            done = sim.rollout_all(sim.limits.rollout)
            took = time.monotonic() - started
            shapes.halt.set()
            shapes.join(5)
        finally:
            sim.stop()
        self.assertTrue(all(done.values()), f"rollouts: {done}")
        print(f"  rollouts done in {took:.1f}s; per Deployment: replicas, new pods started together, "
              f"seconds both bucket shapes led", flush=True)
        for d in old:
            print(f"  {d:<24} {replicas[d]}  {shapes.started_together.get(d)}  {shapes.window(d):5.1f}s",
                  flush=True)
        for d in old:
            self.assertEqual(shapes.started_together.get(d), replicas[d],
                             f"{d}: new pods existing when the first turned Ready")

    def test_shipped_against_policies(self):
        variants = [v.strip() for v in os.environ.get("KHW_SIM_VARIANTS", "shipped,recommended").split(",") if v.strip()]
        unknown = [v for v in variants if v not in VARIANTS]
        self.assertEqual(unknown, [], f"KHW_SIM_VARIANTS: unknown variants (known: {', '.join(VARIANTS)})")
        results = {v: self.run_variant(v) for v in variants}
        print(f"\n== {self.title}: the fewest ready replicas of each component, per step")
        for v, steps in results.items():
            for step, rows in steps.items():
                for r in rows.values():
                    print("  " + r.line())
        if "shipped" in results:
            drain = next(iter(results["shipped"]["drain"].values())).note
            self.assertIn("FAILED", drain, "Knative as shipped: its 80% PDBs block the drain")
            evicted = results["shipped"]["evict every controller pod"][f"{SERVING}/controller"]
            self.assertIn("evicted 1 of 1 at once, 0 refused (budgets: none)", evicted.note, evicted.line())
        if "recommended" in results:
            self.check_recommended(results["recommended"])

    def check_recommended(self, steps: dict[str, dict[str, simcluster.Row]]):
        """The steps a run has (a real cluster's: no preemption or zone loss; "rollout restart" for
        "rollout on zones left")."""
        for step in ("install 1.20", "upgrade to 1.23", "rollout on zones left", "rollout restart"):
            for c, r in steps.get(step, {}).items():
                self.assertEqual(r.note, "rolled out", f"{step}: {c}: {r.line()}")
        for step in ("upgrade to 1.23", "drain", "preemption", "zone loss", "rollout on zones left", "rollout restart"):
            for c, r in steps.get(step, {}).items():
                self.assertGreaterEqual(r.min_ready, 2, f"{step}: {c} fell below 2 ready: {r.line()}")
        drain = next(iter(steps["drain"].values())).note
        self.assertIn("done", drain)
        for c, r in steps.get("zone loss", {}).items():
            self.assertEqual((r.end_ready, r.pending), (r.want, 0), f"zone loss: {c}: {r.line()}")
        evicted = steps["evict every controller pod"][f"{SERVING}/controller"]
        self.assertGreaterEqual(evicted.min_ready, 2, f"the controller's created budget: {evicted.line()}")
        # Evictions go one after another: a replacement the fake kubelets make Ready at once can free
        # the budget again before the last one, so how many go varies; some must be refused.
        m = re.search(r"evicted (\d+) of 3 at once, (\d+) refused \(budgets: \['controller-pdb'\]\)", evicted.note)
        self.assertTrue(m and int(m.group(2)) >= 1, evicted.line())
        scaled = steps["HPA scale-out to 5"][f"{SERVING}/activator"]
        self.assertEqual((scaled.end_ready, scaled.pending), (5, 0), scaled.line())


if __name__ == "__main__":
    unittest.main()
