"""The chaos soak's stage (chaos.py): the simulated cluster with the product on it, set up and kept.

The cluster is simcluster's (real control plane, fake kubelets for 6 nodes over 3 zones); on it the chart
governing knative-serving, kourier-system and knative-eventing, two webhook replicas behind the
readiness-checked proxy (chaos_webhooks.py), the PriorityClass and the recommended policies, then Knative
Serving + Kourier and Eventing at FIRST_RELEASE, applied through the webhook. `Stage` also applies the
releases the upgrade faults move between, waits for rollouts, and says whether everything has settled.
"""

from __future__ import annotations

import datetime
import json
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable

import yaml

import cluster
import simcluster
from chaos_webhooks import Proxy, Replicas
from install import KNATIVE_WEBHOOK_GROUPS, ROOT, Install
from simcluster import LEFT_OUT, SimCluster

GOVERNED = ("knative-serving", "kourier-system", "knative-eventing")
CONTROLLERS = simcluster.CONTROLLERS + ",statefulset"
REPLICAS = 2
PRIORITY_CLASS = ROOT / "examples" / "priorityclass.yaml"
POLICIES = {  # policy name -> file (the recommended policies)
    "serving": ROOT / "examples" / "policy.yaml",
    "kourier-gateway": ROOT / "examples" / "policies" / "kourier-system.yaml",
    "eventing": ROOT / "examples" / "policies" / "knative-eventing.yaml",
}
RELEASES = {
    ("serving", "1.20"): [ROOT / "tests/fixtures/knative-v1.20.0" / f for f in ("2-serving-core.yaml", "3-serving-hpa.yaml", "net-kourier.yaml")],
    ("serving", "1.23"): [ROOT / "tests/fixtures/knative-v1.23.0" / f for f in ("2-serving-core.yaml", "3-serving-hpa.yaml", "net-kourier.yaml")],
    ("eventing", "1.20"): [ROOT / "tests/fixtures/knative-eventing-v1.20.0" / f for f in ("2-eventing-core.yaml", "4-in-memory-channel.yaml", "5-mt-channel-broker.yaml")],
    ("eventing", "1.23"): [ROOT / "tests/fixtures/knative-eventing-v1.23.0" / f for f in ("2-eventing-core.yaml", "4-in-memory-channel.yaml", "5-mt-channel-broker.yaml")],
}
PRODUCT_NAMESPACES = {"serving": ("knative-serving", "kourier-system"), "eventing": ("knative-eventing",)}
FIRST_RELEASE = "1.20"
TRANSIENT = ("connection refused", "connection reset", "EOF", "the server is currently unable", "TLS handshake timeout",
             "i/o timeout", "context deadline exceeded", "Client.Timeout", "http2: ", "ServiceUnavailable")


# -- small helpers ----------------------------------------------------------------------------------
def component_of(pod: dict) -> str | None:
    """`ns/deployment` of a pod a ReplicaSet owns (its name less the pod-template hash)."""
    owner = (pod["metadata"].get("ownerReferences") or [{}])[0]
    if owner.get("kind") != "ReplicaSet":
        return None
    return f"{pod['metadata']['namespace']}/{owner['name'].rsplit('-', 1)[0]}"


def pod_ready(pod: dict) -> bool:
    conds = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
    return conds.get("Ready") == "True"


def node_ready(node: dict) -> bool:
    conds = {c["type"]: c["status"] for c in node.get("status", {}).get("conditions", [])}
    return conds.get("Ready") == "True"


def created_age_s(obj: dict) -> float:
    ts = obj["metadata"].get("creationTimestamp")
    if not ts:
        return 0.0
    t = datetime.datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    return max(0.0, (datetime.datetime.now(datetime.timezone.utc) - t).total_seconds())


def transient(stderr: str) -> bool:
    return any(s in stderr for s in TRANSIENT)


def release_text(src: Path) -> str:
    """A release file without Knative's webhook configurations and the objects only Knative's own webhook
    may admit (no process answers them), byte for byte otherwise."""
    kept = []
    for d in src.read_text().split("\n---\n"):
        head = "\n" + d
        if any(f"\nkind: {k}\n" in head + "\n" for k in LEFT_OUT):
            continue
        if any(f"\napiVersion: {g}" in head for g in KNATIVE_WEBHOOK_GROUPS):
            continue
        kept.append(d)
    return "\n---\n".join(kept)


# -- raw calls to the API server -------------------------------------------------------------------------
class Http:
    """Bounded calls with the admin token; (status, body text), status 0 when no answer came."""

    def __init__(self, server: str, token: str):
        self.server = server
        self.token = token
        self.ctx = ssl.create_default_context()
        self.ctx.check_hostname = False
        self.ctx.verify_mode = ssl.CERT_NONE

    def call(self, method: str, path: str, body=None, ctype: str = "application/json", timeout: float = 20) -> tuple[int, str]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method, headers={
            "Content-Type": ctype, "Accept": "application/json", "Authorization": f"Bearer {self.token}"})
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=timeout) as r:
                return r.status, r.read().decode(errors="replace")
        except urllib.error.HTTPError as e:
            with e:
                return e.code, e.read().decode(errors="replace")
        except (OSError, ssl.SSLError) as e:  # refused, reset, timed out: the API server is away
            return 0, str(e)

    def get(self, path: str, timeout: float = 20):
        code, text = self.call("GET", path, timeout=timeout)
        if code != 200:
            raise AssertionError(f"GET {path}: {code}: {text[:200]}")
        return json.loads(text)

    def merge(self, path: str, patch: dict) -> tuple[int, str]:
        return self.call("PATCH", path, patch, "application/merge-patch+json")


# -- the stage -------------------------------------------------------------------------------------------
class Stage:
    """The cluster, the chart, the replicas and the proxy of one run; `history`, once the run opens it, gets
    the applies (and the harness's notes) of the releases."""

    def __init__(self, workdir: Path, binary: str, interval_s: int, start_s: float, terminating_s: float,
                 log: Callable[[str], None]):
        self.workdir = workdir
        self.binary = binary
        self.interval_s = interval_s
        self.start_s = start_s
        self.terminating_s = terminating_s
        self.log = log
        self.apiserver_epoch = 0  # kube-apiserver restarts so far (its counters start again with each)
        self.install_s = 0.0
        self.sim = self.http = self.install = self.replicas = self.proxy = None  # until start()
        self.history = None
        self.policy_docs = {n: yaml.safe_load(p.read_text()) for n, p in POLICIES.items()}

    # -- set up, torn down --
    def start(self) -> None:
        """Everything up, the policies Ready, Knative installed; the reconciler's first pass awaited."""
        t = time.monotonic()
        self.sim = SimCluster(str(self.workdir), self.binary, "chaos", [], controllers=CONTROLLERS, namespaces=GOVERNED,
                              start_s=self.start_s, terminating_s=self.terminating_s)
        self.sim.start()
        self.sim.monitor.stopped = True  # the recorder samples instead
        self.http = Http(self.sim.plane.server, self.sim.plane.admin_token)
        kubectl = self.sim.kubectl
        for ns in ("kourier-system", "knative-eventing"):
            kubectl.run("create", "namespace", ns)
        self.install = Install(self.sim.plane, self.binary, str(self.workdir))
        self.install.install("governedNamespaces={" + ",".join(GOVERNED) + "}", f"reconcile.interval={self.interval_s}s")
        self.replicas = Replicas(self.install, [f"webhook-{i}" for i in range(REPLICAS)])
        self.proxy = Proxy(self.install.port, self.replicas)
        self.proxy.start()
        self.replicas.start()
        cluster.wait_for(lambda: self.replicas.count_up() == REPLICAS, "both replicas up behind the proxy", 30)
        kubectl.apply(str(PRIORITY_CLASS))
        kubectl.apply(json.dumps({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                  "metadata": {"name": "sim-burst"}, "value": 1000}) + "\n")
        for name in POLICIES:
            kubectl.apply(yaml.safe_dump(self.policy_docs[name]))
        for name in POLICIES:
            self.install.wait_policy(name, "True", limit_s=60)
        for product in ("serving", "eventing"):
            for path in self.release_files(product, FIRST_RELEASE):
                for attempt in range(3):  # custom resources before their definitions were established: again
                    if self.apply_release(path, "client-side", None, f"install {path.name}", record=False)[0] == 0:
                        break
                    time.sleep(3)
                else:
                    raise AssertionError(f"the install apply of {path} failed")
        ok = cluster.wait_for_bool(self.settled, 300, 2)
        # the reconciler's first pass (budgets it creates) before the faults: audit in line
        in_line = cluster.wait_for_bool(lambda: self.audit()[0] == 0, self.interval_s + 60, 3)
        self.install_s = time.monotonic() - t
        self.log(f"audit in line before the faults: {in_line}")
        self.log(f"installed in {self.install_s:.0f}s ({'settled' if ok else 'NOT settled'}): {self.status()}")

    def stop(self) -> None:
        """What start() got to, stopped: the replicas, the proxy, the cluster."""
        for part in (self.replicas, self.proxy, self.sim):
            if part is not None:
                part.stop()

    # -- what faults and the recorder ask of it --
    def audit(self) -> tuple[int, str]:
        """`knative-ha-webhook audit` against the cluster: its exit code (-1 when it timed out) and output."""
        try:
            r = subprocess.run([self.binary, "audit", "--kubeconfig", self.sim.plane.kubeconfig,
                                "--request-timeout", "20s"], capture_output=True, text=True, timeout=60)
            return r.returncode, (r.stdout + r.stderr)
        except subprocess.TimeoutExpired:
            return -1, "audit timed out after 60 s"

    def restart_apiserver(self, down_s: float, grace_s: float) -> float:
        """kube-apiserver stopped and started again (same port, certificates, etcd); the seconds it took."""
        took = self.sim.plane.restart_apiserver(down_s, grace_s=grace_s)
        self.apiserver_epoch += 1
        return took

    # -- releases --
    def release_files(self, product: str, version: str) -> list[Path]:
        d = self.workdir / "knative" / f"{product}-{version}"
        d.mkdir(parents=True, exist_ok=True)
        out = []
        for src in RELEASES[(product, version)]:
            dst = d / src.name
            if not dst.exists():
                dst.write_text(release_text(src))
            out.append(dst)
        return out

    def conversion_off(self, path: Path, fid: int | None) -> None:
        """Before a server-side apply: a CRD whose release turns its conversion webhook off (Eventing 1.23's
        requestreplies: strategy None) gets it off here first. `kubectl apply --server-side` cannot drop the
        `webhook` block that client-side apply and the API server own, and the API server refuses the
        result (conversion.webhookClientConfig "should not be set"); the same without the webhook (a bare
        control plane), so a harness step, not a fault of the product."""
        for d in yaml.safe_load_all(path.read_text()):
            if not d or d.get("kind") != "CustomResourceDefinition":
                continue
            if (d["spec"].get("conversion") or {}).get("strategy", "None") == "Webhook":
                continue
            name = d["metadata"]["name"]
            code, text = self.http.call("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
            if code != 200 or (json.loads(text)["spec"].get("conversion") or {}).get("strategy") != "Webhook":
                continue
            code, _ = self.http.merge(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}",
                                      {"spec": {"conversion": {"strategy": "None", "webhook": None}}})
            if self.history is not None:
                self.history.write("note", text=f"harness: CRD {name} conversion set to None before the server-side "
                                   f"apply of {path.name} (PATCH {code}; kubectl's server-side apply cannot drop it)",
                                   fault_id=fid)

    def apply_release(self, path: Path, how: str, fid: int | None, what: str, record: bool = True) -> tuple[int, str]:
        extra = ["--server-side", "--force-conflicts"] if how == "server-side" else []
        if how == "server-side":
            self.conversion_off(path, fid)
        r = self.sim.kubectl.run("apply", *extra, "-f", str(path), check=False, timeout=300)
        if record and self.history is not None:
            self.history.write("apply", what=what, rc=r.returncode, stderr=r.stderr[-2000:], fault_id=fid, how=how,
                               transient=transient(r.stderr), apiserver_epoch=self.apiserver_epoch)
        elif r.returncode != 0:
            self.log(f"apply {what}: rc={r.returncode} {r.stderr.strip()[-300:]}")
        return r.returncode, r.stderr

    def rollouts(self, namespaces, limit_s: float) -> dict[str, bool]:
        deadline = time.monotonic() + limit_s
        done = {}
        try:
            deps = [f"{d['metadata']['namespace']}/{d['metadata']['name']}"
                    for d in self.http.get("/apis/apps/v1/deployments")["items"] if d["metadata"]["namespace"] in namespaces]
        except AssertionError:
            return {"?": False}
        for key in sorted(deps):
            ns, name = key.split("/")
            ok = False
            while not ok and time.monotonic() < deadline:
                left = max(1, int(deadline - time.monotonic()))
                r = self.sim.kubectl.run("-n", ns, "rollout", "status", f"deployment/{name}", f"--timeout={left}s",
                                         check=False, timeout=left + 30)
                ok = r.returncode == 0
                if not ok and not transient(r.stderr):
                    break
                if not ok:
                    time.sleep(2)
            done[key] = ok
        return done

    # -- state --
    def status(self) -> dict:
        """ready/want/pending per component, the nodes Ready, webhooks up (as a sample)."""
        deployments = self.http.get("/apis/apps/v1/deployments", timeout=10)["items"]
        pods = self.http.get("/api/v1/pods", timeout=10)["items"]
        nodes = self.http.get("/api/v1/nodes", timeout=10)["items"]
        want = {f"{d['metadata']['namespace']}/{d['metadata']['name']}": d["spec"].get("replicas", 1)
                for d in deployments if d["metadata"]["namespace"] in GOVERNED}
        ready = {k: 0 for k in want}
        pending = 0
        for p in pods:
            k = component_of(p)
            if p["metadata"].get("deletionTimestamp"):
                continue
            if k in want and pod_ready(p) and p["spec"].get("nodeName") not in self.sim.lost:
                ready[k] += 1
            if p.get("status", {}).get("phase") == "Pending" and p["metadata"]["namespace"] in GOVERNED:
                pending += 1
        return {"want": want, "ready": ready, "pending": pending, "nodes_ready": sum(1 for n in nodes if node_ready(n)),
                "nodes_total": len(nodes)}

    def settled(self) -> bool:
        s = self.status()
        return (all(s["ready"][k] >= w for k, w in s["want"].items()) and s["pending"] == 0
                and s["nodes_ready"] == s["nodes_total"] and self.replicas.count_up() == len(self.replicas.names))

