"""Fake kubelets for the simulated cluster, as kubernetes-sigs/kwok does it: no container ever runs.

One thread plays every node: it registers the Nodes (zone and hostname labels, allocatable, Ready,
addresses), removes the `node.kubernetes.io/not-ready` taint the API server's TaintNodesByCondition
admission puts on a new Node, renews each Node's Lease in `kube-node-lease`, marks every pod the
scheduler binds to one of its live nodes Running and Ready with an IP, and deletes terminating pods at
once (the grace period is a real kubelet's business), or, with `terminating_s`, that many seconds after it
first saw them terminating (a container's graceful shutdown: the pod stays Terminating, bound to its node,
as the scheduler sees a real one during its terminationGracePeriodSeconds). A node it is told is lost
(`lose`) is tainted unreachable, marked NotReady, and no longer served: its pods are deleted by the caller,
as the taint-eviction controller would after its toleration runs out.

`Api` is also what the real-cluster mode (KHW_E2E_KUBECONFIG) talks to its cluster with:
`Api.from_kubeconfig` takes the current context's token or client certificate (what kind and k3d write).
"""

from __future__ import annotations

import base64
import datetime
import json
import os
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

UNREACHABLE = "node.kubernetes.io/unreachable"
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Api:
    """Bounded JSON calls to the API server with a bearer token or a client certificate (every call has a
    20 s deadline)."""

    def __init__(self, server: str, token: str | None, ctx: ssl.SSLContext | None = None):
        self.server = server
        self.token = token
        if ctx is None:  # the local control plane: a token, its self-signed certificate not verified
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        self.ctx = ctx

    @classmethod
    def from_kubeconfig(cls, path: str) -> "Api":
        """The current context of a kubeconfig: its server, verified against the kubeconfig's CA (unless
        `insecure-skip-tls-verify`), and its user's token (`token`, `tokenFile`) or client certificate
        (`client-certificate[-data]`, `client-key[-data]`; written to a private temporary directory for
        `load_cert_chain` and removed at once). Exec and auth-provider plugins are not supported."""
        r = subprocess.run(["kubectl", f"--kubeconfig={path}", "config", "view", "--minify", "--flatten", "-o", "json"],
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            raise AssertionError(f"kubeconfig {path}: {r.stderr.strip()}")
        view = json.loads(r.stdout)
        if not view.get("clusters"):
            raise AssertionError(f"kubeconfig {path}: no current context")
        server_cfg = view["clusters"][0]["cluster"]
        user = (view.get("users") or [{}])[0].get("user") or {}
        if server_cfg.get("insecure-skip-tls-verify"):
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        elif server_cfg.get("certificate-authority-data"):
            ctx = ssl.create_default_context(cadata=base64.b64decode(server_cfg["certificate-authority-data"]).decode())
        else:  # the system's CAs
            ctx = ssl.create_default_context()
        token = user.get("token")
        if not token and user.get("tokenFile"):
            with open(user["tokenFile"]) as f:
                token = f.read().strip()
        cert, key = user.get("client-certificate-data"), user.get("client-key-data")
        if cert and key:
            with tempfile.TemporaryDirectory(prefix="khw-api-") as d:  # mode 0700
                cert_path, key_path = os.path.join(d, "client.crt"), os.path.join(d, "client.key")
                for file, data in ((cert_path, cert), (key_path, key)):
                    fd = os.open(file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    with os.fdopen(fd, "wb") as f:
                        f.write(base64.b64decode(data))
                ctx.load_cert_chain(cert_path, key_path)
        elif user.get("client-certificate") and user.get("client-key"):
            ctx.load_cert_chain(user["client-certificate"], user["client-key"])
        elif not token:
            plugin = "exec" if "exec" in user else "auth-provider" if "auth-provider" in user else None
            raise AssertionError(f"kubeconfig {path}: the current user has neither a token nor a client certificate"
                                 + (f" (an {plugin} plugin: not supported here)" if plugin else ""))
        return cls(server_cfg["server"].rstrip("/"), token, ctx)

    def call(self, method: str, path: str, body=None, content_type: str = "application/json"):
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(self.server + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=20) as r:
                return json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")[:300]
            e.close()
            if e.code == 404 and method in ("DELETE", "PATCH"):
                return None  # gone meanwhile: nothing left to do
            raise AssertionError(f"{method} {path}: HTTP {e.code}: {detail}") from None

    def get(self, path: str):
        return self.call("GET", path)

    def merge(self, path: str, body):
        return self.call("PATCH", path, body, "application/merge-patch+json")


class FakeKubelets(threading.Thread):
    """Every node of the simulated cluster, served from one thread until `stop()`. With `start_s`, a
    bound pod turns Running and Ready only that many seconds after the kubelets first saw it (a
    container's start-up; 0: at once). With `terminating_s`, a terminating pod is deleted only that many
    seconds after the kubelets first saw its deletionTimestamp (a container's graceful shutdown; 0: at
    once)."""

    def __init__(self, api: Api, nodes: dict[str, str], cpu: str = "4", memory: str = "16Gi", pods: str = "110",
                 start_s: float = 0.0, terminating_s: float = 0.0):
        super().__init__(daemon=True, name="fake-kubelets")
        self.api = api
        self.start_s = start_s
        self.terminating_s = terminating_s
        self._seen: dict[str, float] = {}  # pod uid -> when first seen bound
        self._terminating: dict[str, float] = {}  # pod uid -> when first seen terminating
        self.nodes = dict(nodes)  # name -> zone
        self.capacity = {"cpu": cpu, "memory": memory, "pods": pods}
        self.lost: set[str] = set()
        self.errors: list[str] = []
        self._halt = threading.Event()
        self._ip = 10

    # -- nodes -------------------------------------------------------------------------------
    def register(self) -> None:
        for name, zone in self.nodes.items():
            self.api.call("POST", "/api/v1/nodes", {
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": name, "labels": {ZONE: zone, HOSTNAME: name, "kubernetes.io/os": "linux",
                                                      "type": "fake-kubelet"}}})
            self.api.merge(f"/api/v1/nodes/{name}", {"spec": {"taints": None}})
            self._status(name, ready=True)

    def _status(self, name: str, ready: bool) -> None:
        t = now()
        cond = {"type": "Ready", "status": "True" if ready else "Unknown", "lastHeartbeatTime": t,
                "lastTransitionTime": t, "reason": "KubeletReady" if ready else "NodeStatusUnknown",
                "message": "fake kubelet" if ready else "the fake kubelet stopped posting status"}
        self.api.merge(f"/api/v1/nodes/{name}/status", {"status": {
            "capacity": self.capacity, "allocatable": self.capacity, "conditions": [cond],
            "addresses": [{"type": "InternalIP", "address": f"192.168.0.{list(self.nodes).index(name) + 10}"},
                          {"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": "v1.36.2-fake", "architecture": "amd64", "operatingSystem": "linux"}}})

    def _renew_leases(self) -> None:
        for name in self.nodes:
            if name in self.lost:
                continue
            path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
            spec = {"holderIdentity": name, "leaseDurationSeconds": 40,
                    "renewTime": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")}
            try:
                self.api.merge(path, {"spec": spec}) or self.api.call(
                    "POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
                    {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name}, "spec": spec})
            except AssertionError as e:
                self.errors.append(str(e))

    def lose(self, names: list[str]) -> None:
        """The nodes stop answering: tainted unreachable (NoSchedule and NoExecute) and NotReady."""
        for name in names:
            self.lost.add(name)
            t = now()
            self.api.merge(f"/api/v1/nodes/{name}", {"spec": {"taints": [
                {"key": UNREACHABLE, "effect": "NoSchedule", "timeAdded": t},
                {"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": t}]}})
            self._status(name, ready=False)

    # -- pods --------------------------------------------------------------------------------
    def _serve_pods(self) -> None:
        pods = self.api.get("/api/v1/pods?fieldSelector=spec.nodeName!%3D")["items"]
        for pod in pods:
            meta, spec, status = pod["metadata"], pod["spec"], pod.get("status", {})
            node = spec.get("nodeName")
            if node not in self.nodes or node in self.lost:
                continue
            path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
            if meta.get("deletionTimestamp"):
                since = self._terminating.setdefault(meta["uid"], time.monotonic())
                if time.monotonic() - since < self.terminating_s:
                    continue
                self.api.call("DELETE", path, {"gracePeriodSeconds": 0})
            elif status.get("phase") != "Running":
                seen = self._seen.setdefault(meta["uid"], time.monotonic())
                if time.monotonic() - seen < self.start_s:
                    continue
                self._ip += 1
                ip = f"10.244.{self._ip // 250}.{self._ip % 250 + 2}"
                t = now()
                conds = [{"type": c, "status": "True", "lastTransitionTime": t}
                         for c in ("PodScheduled", "Initialized", "ContainersReady", "Ready")]
                containers = [{"name": c["name"], "image": c["image"], "imageID": "", "ready": True, "started": True,
                               "restartCount": 0, "state": {"running": {"startedAt": t}}} for c in spec["containers"]]
                self.api.merge(path + "/status", {"status": {
                    "phase": "Running", "conditions": conds, "podIP": ip, "podIPs": [{"ip": ip}],
                    "hostIP": "192.168.0.1", "startTime": t, "containerStatuses": containers}})

    def run(self) -> None:
        last_lease = 0.0
        while not self._halt.is_set():
            try:
                self._serve_pods()
                if time.monotonic() - last_lease > 10:
                    self._renew_leases()
                    last_lease = time.monotonic()
            except (AssertionError, OSError) as e:  # the API server stopping, a conflict: try again
                self.errors.append(str(e))
            self._halt.wait(0.3)

    def stop(self) -> None:
        self._halt.set()
        self.join(10)
