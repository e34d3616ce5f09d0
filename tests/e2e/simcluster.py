"""The simulated multi-zone cluster: what the objects the webhook writes do when a scheduler, the
controllers and (fake) kubelets act on them.

A real etcd, kube-apiserver, kube-scheduler and kube-controller-manager (deployment, replicaset,
disruption, HPA, garbage-collector and namespace controllers) from KUBEBUILDER_ASSETS, and fake kubelets
(`kubelet.py`) for 6 nodes over 3 zones. Knative Serving and Kourier go in as `preview` admits them
(what the webhook would answer for each object), without Knative's own webhook configurations (no process
answers them). Each step samples every Deployment's ready replicas twice a second and reports per
component the fewest ready, the seconds the step took and the pods left Pending.

With KHW_E2E_KUBECONFIG (the real-cluster mode: kind or k3d nodes running Knative's real images) no
control plane is started and no fake kubelet runs: the same objects go into that cluster, whose nodes'
zones are their `topology.kubernetes.io/zone` labels, with longer limits (`REAL`); before and after each
variant everything it installs is removed (`remove_knative`). Only the steps that need no fake kubelet
run there (test_simcluster.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

import cluster
from kubelet import ZONE, Api, FakeKubelets

ROOT = Path(__file__).resolve().parents[2]
NAMESPACES = ("knative-serving", "kourier-system")
ZONES = ("zone-a", "zone-b", "zone-c")
NODES = {f"sim-{z[-1]}{i}": z for z in ZONES for i in (1, 2)}
CONTROLLERS = "deployment,replicaset,disruption,horizontalpodautoscaling,garbagecollector,namespace"
BINARIES = ("kube-apiserver", "etcd", "kube-scheduler", "kube-controller-manager")
SKIP_LINE = ("simulated cluster: skipped: KUBEBUILDER_ASSETS needs kube-apiserver, etcd, kube-scheduler and "
             "kube-controller-manager (docs/testing.md)")
REAL_SKIP_LINE = "real cluster: skipped: KHW_E2E_KUBECONFIG's cluster has no Ready node that takes pods"
# On a real cluster the namespaces this suite installs carry this annotation: it deletes only those (a
# Knative it did not install is left alone, and the test skipped).
OWNED = "knativeha.dev/e2e-simcluster"
NO_ZONE = "no zone label"
PRIORITY_CLASS = "knative-control-plane"  # examples/priorityclass.yaml
LEFT_OUT = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
RELEASES = {
    "1.20": [ROOT / "tests/fixtures/knative-v1.20.0" / f for f in ("2-serving-core.yaml", "3-serving-hpa.yaml", "net-kourier.yaml")],
    "1.23": [ROOT / "tests/fixtures/knative-v1.23.0" / f for f in ("2-serving-core.yaml", "3-serving-hpa.yaml", "net-kourier.yaml")],
}


def assets_ready() -> bool:
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    return bool(assets) and all((Path(assets) / b).exists() for b in BINARIES)


def real_kubeconfig() -> str | None:
    """KHW_E2E_KUBECONFIG: an existing cluster's kubeconfig (the real-cluster mode), or None. It wins over
    KUBEBUILDER_ASSETS, as in cluster.from_env."""
    return os.environ.get("KHW_E2E_KUBECONFIG") or None


@dataclass(frozen=True)
class Limits:
    """Seconds a step may take: real pods pull images, start containers and drain for a while."""
    install: int  # the first rollout of every Deployment (image pulls)
    rollout: int  # the other rollouts
    drain: int  # kubectl drain --timeout
    full: int  # back to the full count after the drain
    hpa: int  # the HPA's new replicas all ready
    remove: int  # the namespaces and the cluster-scoped objects gone (real cluster)


SIMULATED = Limits(install=150, rollout=150, drain=45, full=60, hpa=40, remove=0)
REAL = Limits(install=600, rollout=300, drain=180, full=300, hpa=180, remove=600)


def untainted(node: dict) -> bool:
    """A Ready node that takes ordinary pods (not cordoned, no NoSchedule or NoExecute taint)."""
    conds = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
    taints = [t for t in node["spec"].get("taints") or [] if t.get("effect") in ("NoSchedule", "NoExecute")]
    return conds.get("Ready") == "True" and not node["spec"].get("unschedulable") and not taints


def takes_pods(kubeconfig: str) -> bool:
    """Whether the cluster has a node that runs pods (an API server alone has none)."""
    return any(untainted(n) for n in Api.from_kubeconfig(kubeconfig).get("/api/v1/nodes")["items"])


def foreign_namespaces(kubeconfig: str) -> list[str]:
    """Those of knative-serving and kourier-system that exist without this suite's annotation (OWNED):
    a Knative the suite did not install, which it would delete."""
    names = {ns["metadata"]["name"]: ns for ns in Api.from_kubeconfig(kubeconfig).get("/api/v1/namespaces")["items"]}
    return [n for n in NAMESPACES if n in names and OWNED not in (names[n]["metadata"].get("annotations") or {})]


def cluster_scoped(files: list[Path]) -> list[dict]:
    """The objects of the manifests that have no namespace (CRDs, cluster roles, webhook configurations)
    but the Namespaces, each once."""
    seen, out = set(), []
    for f in files:
        for d in yaml.safe_load_all(f.read_text()):
            if not d or d.get("kind") == "Namespace" or d["metadata"].get("namespace"):
                continue
            key = (d["apiVersion"].split("/")[0], d["kind"], d["metadata"]["name"])
            if key not in seen:
                seen.add(key)
                out.append(d)
    return out


@dataclass
class Row:
    """One component through one step."""
    variant: str
    step: str
    component: str
    want: int
    min_ready: int
    end_ready: int
    pending: int
    seconds: float
    note: str = ""

    def line(self) -> str:
        return (f"{self.variant:<14} {self.step:<22} {self.component:<38} want={self.want:<2} min_ready={self.min_ready:<2} "
                f"end_ready={self.end_ready:<2} pending={self.pending:<2} {self.seconds:6.1f}s {self.note}")


@dataclass
class Monitor:
    """Counts the ready pods of every Deployment of the governed namespaces twice a second while a step
    runs: Running and Ready, not terminating, on a node that is not lost (the pods themselves, not the
    Deployment's status, which the controllers update a moment later)."""
    api: Api
    lost: set = field(default_factory=set)
    minimum: dict = field(default_factory=dict)
    namespaces: tuple = NAMESPACES
    active: bool = False
    stopped: bool = False

    def start(self) -> "Monitor":
        threading.Thread(target=self._run, daemon=True, name="sim-monitor").start()
        return self

    def deployments(self) -> dict[str, dict]:
        out = {}
        for ns in self.namespaces:
            for d in self.api.get(f"/apis/apps/v1/namespaces/{ns}/deployments")["items"]:
                out[f"{ns}/{d['metadata']['name']}"] = d
        return out

    def ready(self) -> dict[str, int]:
        """Ready pods per Deployment (`namespace/name`), every Deployment present."""
        out = {key: 0 for key in self.deployments()}
        for ns in self.namespaces:
            for p in self.api.get(f"/api/v1/namespaces/{ns}/pods")["items"]:
                owners = p["metadata"].get("ownerReferences") or [{}]
                key = f"{ns}/{owners[0].get('name', '').rsplit('-', 1)[0]}"
                conds = {c["type"]: c["status"] for c in p.get("status", {}).get("conditions", [])}
                if (key in out and conds.get("Ready") == "True" and not p["metadata"].get("deletionTimestamp")
                        and p["spec"].get("nodeName") not in self.lost):
                    out[key] += 1
        return out

    def sample(self) -> None:
        """One sample now (a step calls it right after it takes pods away: the replacements may run
        before the next periodic sample)."""
        for key, ready in self.ready().items():
            self.minimum[key] = min(self.minimum.get(key, ready), ready)

    def _run(self) -> None:
        while not self.stopped:
            try:
                if self.active:
                    self.sample()
            except (AssertionError, OSError):
                pass
            time.sleep(0.5)


class SimCluster:
    """One simulated cluster, fresh for one variant (a policy, or Knative as shipped); with `kubeconfig`,
    an existing (real) cluster instead, cleared of Knative before and after the variant. `controllers`: the
    controller manager's (local control plane); `namespaces`: those whose Deployments are sampled."""

    def __init__(self, workdir: str, binary: str, variant: str, policies: list[str], kubeconfig: str | None = None,
                 start_s: float = 0.0, controllers: str = CONTROLLERS, namespaces: tuple = NAMESPACES,
                 terminating_s: float = 0.0):
        self.workdir = workdir
        self.namespaces = namespaces
        self.start_s = start_s  # the fake kubelets' pod start-up (FakeKubelets)
        self.terminating_s = terminating_s  # how long the fake kubelets keep a terminating pod (FakeKubelets)
        self.binary = binary
        self.variant = variant
        self.policies = policies  # policy files; none: as shipped
        self.rows: list[Row] = []
        self.real = kubeconfig is not None
        self.limits = REAL if self.real else SIMULATED
        self.kubelets: FakeKubelets | None = None
        self.lost: set[str] = set()
        self.nodes: dict[str, str] = dict(NODES)  # name -> zone
        self.zones: list[str] = list(ZONES)
        self.untainted: list[str] = list(NODES)
        if self.real:
            self.plane = cluster.ExistingCluster(kubeconfig, workdir)
        else:
            self.plane = cluster.LocalControlPlane(os.environ["KUBEBUILDER_ASSETS"], workdir, controllers,
                                                   scheduler=True)

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> "SimCluster":
        self.plane.start()
        self.kubectl = self.plane.kubectl
        if self.real:
            self.api = Api.from_kubeconfig(self.plane.kubeconfig)
            self.read_nodes()
            removed, note = self.remove_knative()  # what an earlier run or variant left
            print(f"  before the variant: {note}", flush=True)
            if not removed:
                raise AssertionError(f"real cluster: Knative of an earlier run not removed: {note}")
        else:
            self.api = Api(self.plane.server, self.plane.admin_token)
            self.kubelets = FakeKubelets(self.api, NODES, start_s=self.start_s, terminating_s=self.terminating_s)
            self.kubelets.register()
            self.kubelets.start()
            self.lost = self.kubelets.lost
        self.monitor = Monitor(self.api, self.lost, namespaces=self.namespaces).start()
        return self

    def stop(self) -> None:
        if hasattr(self, "monitor"):
            self.monitor.stopped = True
        if self.kubelets is not None:
            self.kubelets.stop()
        if self.real and hasattr(self, "api"):
            try:
                print(f"  {self.remove_knative()[1]}", flush=True)
            except (AssertionError, OSError, subprocess.SubprocessError) as e:
                print(f"  removing Knative failed: {e}", flush=True)
        self.plane.stop()

    # -- a real cluster --------------------------------------------------------------------------
    def read_nodes(self) -> None:
        """The nodes and their zones (`topology.kubernetes.io/zone`, else NO_ZONE); `zones` in order,
        those of the nodes that take pods first."""
        nodes = self.api.get("/api/v1/nodes")["items"]
        self.nodes = {n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get(ZONE, NO_ZONE) for n in nodes}
        usable = {self.nodes[n["metadata"]["name"]] for n in nodes if untainted(n)}
        others = set(self.nodes.values()) - usable
        order = lambda zs: sorted(zs - {NO_ZONE}) + ([NO_ZONE] if NO_ZONE in zs else [])  # noqa: E731
        self.zones = order(usable) + order(others)
        self.untainted = sorted(n["metadata"]["name"] for n in nodes if untainted(n))

    def describe_nodes(self) -> str:
        return ", ".join(f"{n} ({z}{'' if n in self.untainted else ', takes no pods'})"
                         for n, z in sorted(self.nodes.items()))

    def remove_knative(self) -> tuple[bool, str]:
        """Deletes what a variant installs: the namespaces knative-serving and kourier-system (waiting until
        they are gone), the manifests' cluster-scoped objects (CRDs, cluster roles, webhook configurations;
        --wait) and the PriorityClass. Whether all went, and a note. Refuses (AssertionError) where a
        namespace is not this suite's (OWNED)."""
        foreign = foreign_namespaces(self.plane.kubeconfig)
        if foreign:
            raise AssertionError(f"{', '.join(foreign)}: not installed by test_simcluster (no {OWNED} annotation); not deleted")
        t = time.monotonic()
        deadline = t + self.limits.remove
        self.kubectl.run("delete", "namespace", *NAMESPACES, "--ignore-not-found", "--wait=false", timeout=60)

        def gone() -> bool:
            return not self.kubectl.run("get", "namespace", *NAMESPACES, "--ignore-not-found", "-o", "name",
                                        timeout=30).stdout.strip()

        left = [] if cluster.wait_for_bool(gone, self.limits.remove, 2) else list(NAMESPACES)
        path = Path(self.workdir) / "knative-cluster-scoped.yaml"
        path.write_text(yaml.safe_dump_all(cluster_scoped([f for r in RELEASES.values() for f in r])))
        left_s = max(30, int(deadline - time.monotonic()))
        r = self.kubectl.run("delete", "-f", str(path), "--ignore-not-found", "--wait", f"--timeout={left_s}s",
                             check=False, timeout=left_s + 30)
        if r.returncode != 0:
            left.append(f"cluster-scoped objects ({r.stderr.strip()[:200]})")
        self.kubectl.run("delete", "priorityclass", PRIORITY_CLASS, "--ignore-not-found", timeout=60)
        took = f"{time.monotonic() - t:.1f}s"
        return (not left, f"Knative removed in {took}" if not left else f"Knative removal: left {', '.join(left)} after {took}")

    # -- Knative ---------------------------------------------------------------------------------
    def manifests(self, release: str) -> str:
        files = [str(f) for f in RELEASES[release]]
        if self.policies:
            args = [a for p in self.policies for a in ("--policy-file", p)]
            r = subprocess.run([self.binary, "preview", *args, "-o", "yaml", *files], capture_output=True, text=True,
                               timeout=120)
            if r.returncode != 0:
                raise AssertionError(f"preview failed: {r.stderr}")
            text = r.stdout
        else:
            text = "\n---\n".join(Path(f).read_text() for f in files)
        docs = [d for d in yaml.safe_load_all(text) if d and d.get("kind") not in LEFT_OUT]
        if self.real:  # the namespaces marked as this suite's (remove_knative deletes them)
            for d in docs:
                if d["kind"] == "Namespace":
                    d["metadata"].setdefault("annotations", {})[OWNED] = "true"
        return yaml.safe_dump_all(docs)

    def apply_release(self, release: str) -> None:
        text = self.manifests(release)
        # Custom resources before their definitions were established: once more (twice on a real cluster).
        for attempt in range(3 if self.real else 2):
            last = attempt == (2 if self.real else 1)
            r = self.kubectl.run("apply", "-f", "-", stdin=text, check=last, timeout=180)
            if r.returncode == 0:
                return
            time.sleep(5 if self.real else 2)

    def deployments(self) -> list[str]:
        return sorted(self.monitor.deployments())

    def rollout_all(self, limit_s: float) -> dict[str, bool]:
        """`kubectl rollout status` of every Deployment, within one shared deadline."""
        deadline = time.monotonic() + limit_s
        done = {}
        for key in self.deployments():
            ns, name = key.split("/")
            left = max(1, int(deadline - time.monotonic()))
            r = self.kubectl.run("-n", ns, "rollout", "status", f"deployment/{name}", f"--timeout={left}s",
                                 check=False, timeout=left + 30)
            done[key] = r.returncode == 0
        return done

    # -- what a step leaves ----------------------------------------------------------------------
    def pods(self) -> list[dict]:
        return [p for ns in self.namespaces for p in self.api.get(f"/api/v1/namespaces/{ns}/pods")["items"]]

    def pending_by_component(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.pods():
            if p.get("status", {}).get("phase") == "Pending" and not p["metadata"].get("deletionTimestamp"):
                key = f"{p['metadata']['namespace']}/{p['metadata'].get('labels', {}).get('app', '?')}"
                out[key] = out.get(key, 0) + 1
        return out

    def zones_by_component(self) -> dict[str, list[int]]:
        """Running pods per component, per zone in the order of `zones` (`zone_names()`)."""
        out: dict[str, list[int]] = {}
        for p in self.pods():
            node = p["spec"].get("nodeName")
            if node in self.nodes and p.get("status", {}).get("phase") == "Running":
                key = f"{p['metadata']['namespace']}/{p['metadata'].get('labels', {}).get('app', '?')}"
                out.setdefault(key, [0] * len(self.zones))[self.zones.index(self.nodes[node])] += 1
        return out

    def zone_names(self) -> str:
        """`a/b/c` for zone-a, zone-b, zone-c."""
        return "/".join(z.removeprefix("zone-") for z in self.zones)

    def step(self, name: str, action, settle_s: float = 0.0, notes: dict | None = None) -> list[Row]:
        """Runs `action()` while sampling; `action` returns a note per component (or one for all) or None."""
        self.monitor.minimum = {}
        self.monitor.active = True
        start = time.monotonic()
        try:
            note = action()
        finally:
            elapsed = time.monotonic() - start
            time.sleep(settle_s)
            self.monitor.active = False
        deployments = self.monitor.deployments()
        ready = self.monitor.ready()
        pending = self.pending_by_component()
        rows = []
        for key, d in sorted(deployments.items()):
            app = d["spec"]["selector"].get("matchLabels", {}).get("app", d["metadata"]["name"])
            component_note = note.get(key, "") if isinstance(note, dict) else (note or "")
            rows.append(Row(self.variant, name, key, d["spec"].get("replicas", 1),
                            min(self.monitor.minimum.get(key, 0), ready[key]), ready[key],
                            pending.get(f"{key.split('/')[0]}/{app}", 0), elapsed, component_note))
        self.rows.extend(rows)
        for r in rows:
            print("  " + r.line(), flush=True)
        return rows

    # -- the scenarios ---------------------------------------------------------------------------
    def drain(self, node: str, limit_s: int | None = None) -> str:
        limit_s = limit_s or self.limits.drain
        t = time.monotonic()
        r = self.kubectl.run("drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--force",
                             f"--timeout={limit_s}s", check=False, timeout=limit_s + 30)
        self.kubectl.run("uncordon", node)
        return f"drain of {node}: {'done' if r.returncode == 0 else 'FAILED'} in {time.monotonic() - t:.1f}s"

    def evict_all(self, namespace: str, app: str) -> str:
        """One Eviction per pod of `app`, all at once (as two drains of the nodes holding them would
        send): which the disruption controller's budget lets through."""
        pods = self.api.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector=app%3D{app}")["items"]
        evicted = refused = 0
        for p in pods:
            name = p["metadata"]["name"]
            body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
            try:
                self.api.call("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction", body)
                evicted += 1
            except AssertionError as e:
                if "HTTP 429" not in str(e):
                    raise
                refused += 1
        budgets = self.api.get(f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets")["items"]
        covering = [b["metadata"]["name"] for b in budgets
                    if b["spec"].get("selector", {}).get("matchLabels", {}).get("app") == app]
        return {f"{namespace}/{app}": f"evicted {evicted} of {len(pods)} at once, {refused} refused (budgets: {covering or 'none'})"}

    def node_of(self, namespace: str, app: str) -> str:
        for p in self.api.get(f"/api/v1/namespaces/{namespace}/pods?labelSelector=app%3D{app}")["items"]:
            if p["spec"].get("nodeName") in self.nodes and p["spec"]["nodeName"] not in self.lost:
                return p["spec"]["nodeName"]
        raise AssertionError(f"no running pod of {namespace}/{app}")

    def lose_zone(self, zone: str) -> None:
        """The zone's nodes go NotReady and tainted unreachable; their pods are deleted, as the taint
        eviction does when the pods' toleration runs out."""
        lost = [n for n, z in NODES.items() if z == zone]
        self.kubelets.lose(lost)
        for p in self.api.get("/api/v1/pods")["items"]:
            if p["spec"].get("nodeName") in lost:
                ns, name = p["metadata"]["namespace"], p["metadata"]["name"]
                self.api.call("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}", {"gracePeriodSeconds": 0})
        self.monitor.sample()

    def wait_full(self, limit_s: float) -> bool:
        """Every Deployment back at its full count (or the limit passed)."""
        def full() -> bool:
            want = {k: d["spec"].get("replicas", 1) for k, d in self.monitor.deployments().items()}
            return all(n >= want[k] for k, n in self.monitor.ready().items())

        return cluster.wait_for_bool(full, limit_s)

    def scale_hpa(self, namespace: str, name: str, minimum: int, limit_s: float | None = None) -> str:
        limit_s = limit_s or self.limits.hpa
        hpa = f"/apis/autoscaling/v2/namespaces/{namespace}/horizontalpodautoscalers/{name}"
        before = self.api.get(hpa)["spec"]
        self.api.merge(hpa, {"spec": {"minReplicas": minimum, "maxReplicas": max(before["maxReplicas"], minimum)}})
        ok = cluster.wait_for_bool(lambda: self.ready_of(namespace, name) >= minimum, limit_s)
        return f"HPA {name} minReplicas {before.get('minReplicas', 1)} -> {minimum}: {'all ready' if ok else 'NOT all ready'}"

    def ready_of(self, namespace: str, name: str) -> int:
        return self.monitor.ready().get(f"{namespace}/{name}", 0)

    def burst(self, replicas: int, cpu: str, limit_s: float = 30) -> str:
        """Pods of priority 1000 that each fill a node: the scheduler preempts lower-priority pods."""
        self.kubectl.apply(json.dumps({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                       "metadata": {"name": "sim-burst"}, "value": 1000}) + "\n")
        self.kubectl.apply(json.dumps({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "burst", "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "burst"}}, "template": {
                "metadata": {"labels": {"app": "burst"}},
                "spec": {"priorityClassName": "sim-burst", "containers": [{
                    "name": "burst", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": cpu}}}]}}}}) + "\n")
        time.sleep(limit_s)
        placed = sum(1 for p in self.api.get("/api/v1/namespaces/default/pods?labelSelector=app%3Dburst")["items"]
                     if p.get("status", {}).get("phase") == "Running")
        self.kubectl.run("-n", "default", "delete", "deployment", "burst", "--wait=false")
        return f"{placed}/{replicas} burst pods ran"


class OwnPlaneCase:
    """A mixin for ClusterCase scenarios that each need a control plane of their own: with the controllers
    they name, and with a scheduler also the fake kubelets of NODES (stopped in tearDown)."""

    kubelets: FakeKubelets | None = None

    def start_own_plane(self, controllers: str, scheduler: bool) -> None:
        import tempfile

        from base import binary
        from install import Install

        parent = os.environ.get("KHW_E2E_WORKDIR") or None
        self.workdir = tempfile.mkdtemp(prefix=f"{self._testMethodName}-", dir=parent)
        self.api = cluster.LocalControlPlane(os.environ["KUBEBUILDER_ASSETS"], self.workdir, controllers,
                                             scheduler=scheduler)
        try:
            self.api.start()
            self.kubectl = self.api.kubectl
            self.install = Install(self.api, binary(), self.workdir)
            if scheduler:
                self.kubelets = FakeKubelets(Api(self.api.server, self.api.admin_token), NODES)
                self.kubelets.register()
                self.kubelets.start()
        except BaseException:
            self.api.stop()
            raise

    def tearDown(self):
        if self.kubelets is not None:
            self.kubelets.stop()
        super().tearDown()
