"""The API server the end-to-end suite and the cluster doc blocks run against.

Two ways to get one, as controller-runtime's envtest does:

- ``KUBEBUILDER_ASSETS`` names a directory holding ``kube-apiserver`` and ``etcd`` (and, optionally,
  ``kube-controller-manager``): a local control plane is started on loopback for each scenario: etcd,
  the API server with RBAC, a static admin token and ServiceAccount tokens from the TokenRequest API,
  and, when its binary is there, the controller manager with only the namespace and garbage-collector
  controllers (so ``kubectl delete namespace`` and owner references behave as in a cluster; there is no
  scheduler and no kubelet, so no pod ever runs).
- ``KHW_E2E_KUBECONFIG`` names the kubeconfig of an existing cluster whose API server can reach this
  machine on 127.0.0.1 (a control plane on this host). Each scenario then removes what the previous one
  installed instead of starting afresh.

``from_env()`` returns ``None`` when neither is set; the caller prints the one skip line.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

ADMIN_TOKEN = "khw-e2e-admin-token"
SKIP_LINE = (
    "e2e: skipped: no API server (set KUBEBUILDER_ASSETS to a directory with kube-apiserver and etcd, "
    "or KHW_E2E_KUBECONFIG to a cluster's kubeconfig; docs/testing.md)"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, what: str, limit_s: float, every_s: float = 0.25):
    """Polls `pred` until it returns a true value (returned) or `limit_s` passes (AssertionError)."""
    deadline = time.monotonic() + limit_s
    last_err = None
    while time.monotonic() < deadline:
        try:
            got = pred()
            if got:
                return got
        except Exception as e:  # noqa: BLE001 - the last error is part of the failure message
            last_err = e
        time.sleep(every_s)
    raise AssertionError(f"timed out after {limit_s}s waiting for {what}" + (f" (last error: {last_err})" if last_err else ""))


def wait_for_bool(pred, limit_s: float, every_s: float = 0.5) -> bool:
    """Whether `pred` returned a true value within `limit_s` (errors count as false)."""
    try:
        wait_for(pred, "", limit_s, every_s)
        return True
    except AssertionError:
        return False


class Kubectl:
    """kubectl against one kubeconfig; every call is bounded."""

    def __init__(self, kubeconfig: str):
        self.kubeconfig = kubeconfig

    def run(self, *args: str, stdin: str | None = None, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        r = subprocess.run(["kubectl", f"--kubeconfig={self.kubeconfig}", *args], input=stdin,
                           capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({r.returncode}): {r.stderr.strip()}")
        return r

    def json(self, *args: str):
        return json.loads(self.run("get", "-o", "json", *args).stdout)

    def apply(self, path_or_yaml: str, *extra: str, check: bool = True) -> subprocess.CompletedProcess:
        if "\n" in path_or_yaml:
            return self.run("apply", *extra, "-f", "-", stdin=path_or_yaml, check=check)
        return self.run("apply", *extra, "-f", path_or_yaml, check=check)

    def token(self, namespace: str, sa: str, duration: str = "2h") -> str:
        return self.run("-n", namespace, "create", "token", sa, f"--duration={duration}").stdout.strip()


class ApiServer:
    """What a scenario needs of an API server: its address, CA, admin kubeconfig and raw GETs."""

    server: str
    ca_pem: bytes
    kubeconfig: str
    admin_token: str | None
    dir: str

    @property
    def kubectl(self) -> Kubectl:
        return Kubectl(self.kubeconfig)

    def kubeconfig_for_token(self, path: str, token: str) -> str:
        cfg = {
            "apiVersion": "v1", "kind": "Config", "current-context": "e2e",
            "clusters": [{"name": "e2e", "cluster": {
                "server": self.server, "certificate-authority-data": base64.b64encode(self.ca_pem).decode()}}],
            "users": [{"name": "e2e", "user": {"token": token}}],
            "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "e2e", "namespace": "default"}}],
        }
        Path(path).write_text(json.dumps(cfg))
        return path

    def raw(self, path: str) -> str:
        return self.kubectl.run("get", "--raw", path).stdout


class LocalControlPlane(ApiServer):
    """etcd and kube-apiserver from KUBEBUILDER_ASSETS, the controller manager running `controllers` when
    its binary is there, and kube-scheduler when `scheduler` is true."""

    def __init__(self, assets: str, workdir: str, controllers: str = "namespace,garbagecollector",
                 scheduler: bool = False):
        self.controllers = controllers
        self.scheduler = scheduler
        self.assets = Path(assets)
        self.dir = workdir
        self.procs: list[tuple[str, subprocess.Popen, object]] = []
        self.port = free_port()
        self.server = f"https://127.0.0.1:{self.port}"
        self.admin_token = ADMIN_TOKEN

    def start(self, timeout_s: float = 120) -> "LocalControlPlane":
        d = Path(self.dir)
        for exe in ("kube-apiserver", "etcd"):
            if not (self.assets / exe).exists():
                raise AssertionError(f"KUBEBUILDER_ASSETS={self.assets} has no {exe}")
        cport, pport = free_port(), free_port()
        (d / "etcd").mkdir(parents=True, exist_ok=True)
        etcd = str(self.assets / "etcd")
        version = subprocess.run([etcd, "--version"], capture_output=True, text=True, timeout=10).stdout
        if "etcd Version" in version:
            cmd = [etcd, f"--data-dir={d}/etcd", f"--listen-client-urls=http://127.0.0.1:{cport}",
                   f"--advertise-client-urls=http://127.0.0.1:{cport}", f"--listen-peer-urls=http://127.0.0.1:{pport}",
                   f"--initial-advertise-peer-urls=http://127.0.0.1:{pport}",
                   f"--initial-cluster=default=http://127.0.0.1:{pport}", "--log-level=warn"]
        else:  # a minimal embedded etcd: DIR CLIENT_PORT PEER_PORT
            cmd = [etcd, f"{d}/etcd", str(cport), str(pport)]
        self._spawn("etcd", cmd)
        wait_for(lambda: socket.create_connection(("127.0.0.1", cport), 0.5).close() or True, "etcd to listen", 30)
        subprocess.run(["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048",
                        "-out", f"{d}/sa.key"], check=True, capture_output=True)
        subprocess.run(["openssl", "pkey", "-in", f"{d}/sa.key", "-pubout", "-out", f"{d}/sa.pub"], check=True,
                       capture_output=True)
        (d / "tokens.csv").write_text(f'{ADMIN_TOKEN},khw-e2e-admin,khw-e2e-admin,"system:masters"\n')
        (d / "certs").mkdir(exist_ok=True)
        self._spawn("kube-apiserver", [
            str(self.assets / "kube-apiserver"), f"--etcd-servers=http://127.0.0.1:{cport}", f"--cert-dir={d}/certs",
            f"--secure-port={self.port}", "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
            "--service-cluster-ip-range=10.0.0.0/24", "--authorization-mode=RBAC",
            f"--token-auth-file={d}/tokens.csv", "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={d}/sa.pub", f"--service-account-signing-key-file={d}/sa.key",
            "--allow-privileged=true", "--disable-admission-plugins=ServiceAccount", "--v=1"])
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE

        def ready() -> bool:
            req = urllib.request.Request(self.server + "/readyz", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
            try:
                with urllib.request.urlopen(req, context=ctx, timeout=5) as r:
                    return r.read() == b"ok"
            except urllib.error.HTTPError as e:  # 500 while post-start hooks run
                e.close()
                return False

        wait_for(ready, f"kube-apiserver /readyz (log: {d}/kube-apiserver.log)", timeout_s, 0.5)
        self.ca_pem = (d / "certs" / "apiserver.crt").read_bytes()
        self.kubeconfig = self.kubeconfig_for_token(f"{d}/admin.kubeconfig", ADMIN_TOKEN)
        kcm = self.assets / "kube-controller-manager"
        if kcm.exists():
            self._spawn("kube-controller-manager", [
                str(kcm), f"--kubeconfig={self.kubeconfig}", f"--controllers={self.controllers}",
                "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
                "--concurrent-namespace-syncs=2", "--horizontal-pod-autoscaler-sync-period=2s",
                "--use-service-account-credentials=false", "--v=1"])
        if self.scheduler:
            self._spawn("kube-scheduler", [
                str(self.assets / "kube-scheduler"), f"--kubeconfig={self.kubeconfig}",
                f"--authentication-kubeconfig={self.kubeconfig}", f"--authorization-kubeconfig={self.kubeconfig}",
                "--leader-elect=false", "--bind-address=127.0.0.1", f"--secure-port={free_port()}", "--v=1"])
        # The default ServiceAccount is made by a controller this plane may not run; the chart makes its own.
        wait_for(lambda: self.kubectl.run("get", "namespace", "default", check=False).returncode == 0,
                 "the default namespace", 30)
        return self

    def stop(self) -> None:
        for _name, p, f in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(5)
            f.close()
        self.procs = []

    def apiserver_ready(self, timeout_s: float = 5) -> bool:
        """Whether kube-apiserver's /readyz answers ok now."""
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        req = urllib.request.Request(self.server + "/readyz", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=timeout_s) as r:
                return r.read() == b"ok"
        except urllib.error.HTTPError as e:
            e.close()
            return False
        except OSError:
            return False

    def restart_apiserver(self, down_s: float = 0.0, timeout_s: float = 120, grace_s: float = 30) -> float:
        """kube-apiserver stopped (SIGTERM, SIGKILL after `grace_s`: its graceful termination keeps watches
        open until then) and started again `down_s` later with the same command: the same port,
        certificates, tokens and etcd (its log appended). Returns the seconds from the signal to /readyz ok
        again."""
        i = next(i for i, (n, _p, _f) in enumerate(self.procs) if n == "kube-apiserver")
        name, proc, log = self.procs[i]
        t = time.monotonic()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        log.close()
        time.sleep(down_s)
        f = open(f"{self.dir}/{name}.log", "a")
        self.procs[i] = (name, subprocess.Popen(proc.args, stdout=f, stderr=subprocess.STDOUT), f)
        wait_for(self.apiserver_ready, f"kube-apiserver /readyz after a restart (log: {self.dir}/{name}.log)",
                 timeout_s, 0.5)
        return time.monotonic() - t

    def _spawn(self, name: str, cmd: list[str]) -> None:
        f = open(f"{self.dir}/{name}.log", "w")
        self.procs.append((name, subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT), f))


class ExistingCluster(ApiServer):
    """A cluster named by KHW_E2E_KUBECONFIG; the admin identity is whatever that kubeconfig holds."""

    def __init__(self, kubeconfig: str, workdir: str):
        self.dir = workdir
        self.kubeconfig = kubeconfig
        self.admin_token = None
        view = json.loads(Kubectl(kubeconfig).run("config", "view", "--minify", "--raw", "-o", "json").stdout)
        cluster = view["clusters"][0]["cluster"]
        self.server = cluster["server"]
        ca = cluster.get("certificate-authority-data")
        self.ca_pem = base64.b64decode(ca) if ca else Path(cluster["certificate-authority"]).read_bytes()

    def start(self) -> "ExistingCluster":
        return self

    def stop(self) -> None:
        pass


def from_env(workdir: str | None = None):
    """The API server the environment names, not yet started, or None."""
    workdir = workdir or tempfile.mkdtemp(prefix="khw-e2e-")
    kubeconfig = os.environ.get("KHW_E2E_KUBECONFIG")
    if kubeconfig:
        return ExistingCluster(kubeconfig, workdir)
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if assets:
        return LocalControlPlane(assets, workdir)
    return None


def configured() -> bool:
    return bool(os.environ.get("KHW_E2E_KUBECONFIG") or os.environ.get("KUBEBUILDER_ASSETS"))


def remove_dir(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
