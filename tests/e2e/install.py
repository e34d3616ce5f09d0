"""The webhook installed as the README says (without cert-manager), and its server run on this machine.

- certificates from ``certs/generate.sh``, the TLS Secret made with ``kubectl create secret tls``;
- the chart installed with ``helm install`` against the API server, exactly as rendered except the
  webhook's ``clientConfig.service``, which the post-renderer ``loopback-webhook`` turns into a loopback
  ``url`` (a control plane without kube-proxy cannot reach a Service);
- the server under test is the built binary, run with the rendered Deployment's own args and env (paths
  and ports swapped for local ones) and a token of the chart's ServiceAccount (TokenRequest API).
"""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import yaml

from cluster import ApiServer, free_port, wait_for

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "knative-ha-webhook"
RELEASE = "knative-ha-webhook"
NAMESPACE = "knative-ha-webhook"
SERVICE_ACCOUNT = "knative-ha-webhook"
WEBHOOK_NAME = "mutate.knativeha.dev"
KNATIVE = ROOT / "tests" / "fixtures" / "knative-v1.23.0"
SERVING_CORE = KNATIVE / "2-serving-core.yaml"
SERVING_HPA = KNATIVE / "3-serving-hpa.yaml"
KOURIER = KNATIVE / "net-kourier.yaml"
POLICY = ROOT / "examples" / "policy.yaml"
PRIORITY_CLASS = ROOT / "examples" / "priorityclass.yaml"


# Knative's own webhooks (failurePolicy Fail) admit these groups; no Knative pod runs on a control plane
# without a kubelet, so the release's objects of these groups (v1.23.0: the Certificate
# routing-serving-certs) cannot be created there and are left out of what the suite applies.
KNATIVE_WEBHOOK_GROUPS = ("serving.knative.dev/", "networking.internal.knative.dev/", "autoscaling.internal.knative.dev/")


def without_knative_webhook_objects(src: Path, dst_dir: Path) -> Path:
    """`src` with the documents Knative's own webhook must admit left out, byte for byte otherwise."""
    docs = src.read_text().split("\n---\n")
    kept = [d for d in docs if not any(f"\napiVersion: {g}" in "\n" + d for g in KNATIVE_WEBHOOK_GROUPS)]
    dst_dir.mkdir(parents=True, exist_ok=True)
    dst = dst_dir / src.name
    dst.write_text("\n---\n".join(kept))
    return dst


def helm_bin() -> str:
    local = ROOT / ".tools" / "bin" / "helm"
    return str(local) if local.exists() else "helm"


class Install:
    """One installation of the chart on one API server, and the servers started for it."""

    def __init__(self, api: ApiServer, binary: str, workdir: str):
        self.api = api
        self.binary = binary
        self.dir = Path(workdir)
        self.kubectl = api.kubectl
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.certs = self.dir / "certs-out"
        self.servers: list[WebhookServer] = []
        self.sa_kubeconfig: str | None = None

    # -- install / uninstall ------------------------------------------------------------------
    def make_certs(self) -> None:
        subprocess.run([str(ROOT / "certs" / "generate.sh"), "-s", RELEASE, "-n", NAMESPACE, "-o", str(self.certs),
                        "-i", "registry.test/knative-ha-webhook"], check=True, capture_output=True, text=True)

    def env(self) -> dict[str, str]:
        """The environment helm and the doc blocks run in: the admin kubeconfig, the loopback URL."""
        e = dict(os.environ)
        e["KUBECONFIG"] = self.api.kubeconfig
        e["KHW_E2E_WEBHOOK_URL"] = self.url
        e["KHW_E2E_PYTHON"] = sys.executable
        return e

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        r = subprocess.run([helm_bin(), *args], capture_output=True, text=True, env=self.env(), timeout=180)
        if check and r.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed: {r.stderr.strip()}")
        return r

    def post_renderer(self) -> list[str]:
        return ["--post-renderer", str(ROOT / "tests" / "e2e" / "loopback-webhook")]

    def install(self, *sets: str, governed_namespace_first: bool = True) -> None:
        """The README's install without cert-manager: namespace, TLS Secret, helm install.

        `governed_namespace_first`: create knative-serving before the chart, which renders Roles there
        (the chart must also install before Knative; `test_install_before_knative` passes False).
        """
        self.make_certs()
        if governed_namespace_first:
            self.kubectl.run("create", "namespace", "knative-serving")
        self.kubectl.run("create", "namespace", NAMESPACE)
        self.kubectl.run("-n", NAMESPACE, "create", "secret", "tls", f"{RELEASE}-tls",
                         f"--cert={self.certs}/tls.crt", f"--key={self.certs}/tls.key")
        ca = (self.certs / "ca.crt").read_bytes()
        self.helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, *self.post_renderer(),
                  "--set", "image.repository=registry.test/knative-ha-webhook",
                  "--set", "certManager.enabled=false", "--set", f"tls.existingSecret={RELEASE}-tls",
                  "--set", f"tls.caBundle={base64.b64encode(ca).decode()}", *sum((["--set", s] for s in sets), []))
        wait_for(lambda: self.kubectl.run("get", "crd", "highavailabilitypolicies.knativeha.dev", "-o",
                                          "jsonpath={.status.conditions[?(@.type=='Established')].status}").stdout == "True",
                 "the CRD to be established", 60)

    def manifest(self) -> list[dict]:
        out = self.helm("get", "manifest", RELEASE, "--namespace", NAMESPACE).stdout
        return [d for d in yaml.safe_load_all(out) if d]

    def deployment(self) -> dict:
        return next(d for d in self.manifest() if d["kind"] == "Deployment")

    # -- policies and Knative ------------------------------------------------------------------
    def apply_policy(self, text_or_path: str = str(POLICY), name: str = "serving") -> None:
        if text_or_path == str(POLICY):
            # The example policy names this PriorityClass; as the install docs do, it is created
            # first (the engine holds back a name the cluster lacks).
            self.kubectl.apply(str(PRIORITY_CLASS))
        self.kubectl.apply(text_or_path)
        self.wait_policy(name, "True")

    def wait_policy(self, name: str, status: str, reason: str | None = None, limit_s: float = 30) -> dict:
        def cond():
            hap = self.kubectl.json("highavailabilitypolicy", name)
            for c in hap.get("status", {}).get("conditions", []):
                if c["type"] == "Ready" and c["status"] == status and (reason is None or c.get("reason") == reason):
                    return c
            return None

        return wait_for(cond, f"policy {name} Ready={status} {reason or ''}", limit_s)

    def knative_files(self, *files: Path) -> list[Path]:
        """The release manifests the suite applies (default: Serving v1.23.0 core, its HPA, Kourier),
        without what Knative's own webhook must admit."""
        files = files or (SERVING_CORE, SERVING_HPA, KOURIER)
        return [without_knative_webhook_objects(f, self.dir / "knative" / f.parent.name) for f in files]

    def apply_knative(self, *files: Path, server_side: bool = False) -> list[Path]:
        """kubectl apply of release manifests ([`knative_files`])."""
        extra = ("--server-side", "--force-conflicts") if server_side else ()
        files = self.knative_files(*files)
        for f in files:
            if self.kubectl.apply(str(f), *extra, check=False).returncode != 0:
                # The CRDs of a file may not be established at its first pass; once more, as users do.
                self.kubectl.apply(str(f), *extra)
        return files

    def govern(self) -> None:
        """The example policy Ready, then the release applied."""
        self.apply_policy()
        self.apply_knative()

    # -- the server under test ----------------------------------------------------------------
    def service_account_kubeconfig(self) -> str:
        if self.sa_kubeconfig is None:
            token = self.kubectl.token(NAMESPACE, SERVICE_ACCOUNT)
            self.sa_kubeconfig = self.api.kubeconfig_for_token(str(self.dir / "sa.kubeconfig"), token)
        return self.sa_kubeconfig

    def start_server(self, name: str = "webhook-0", env: dict[str, str] | None = None,
                     port: int | None = None) -> "WebhookServer":
        """The rendered Deployment's container, run here as pod `name`; `env` overrides its env."""
        container = self.deployment()["spec"]["template"]["spec"]["containers"][0]
        args = list(container["args"])
        metrics_port = free_port()
        swap = {"/tls/tls.crt": str(self.certs / "tls.crt"), "/tls/tls.key": str(self.certs / "tls.key")}
        for i, a in enumerate(args):
            if a in swap:
                args[i] = swap[a]
            elif i > 0 and args[i - 1] == "--listen":
                args[i] = f"127.0.0.1:{port or self.port}"
            elif i > 0 and args[i - 1] == "--metrics-listen":
                args[i] = f"127.0.0.1:{metrics_port}"
        proc_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "KUBECONFIG": self.service_account_kubeconfig()}
        for e in container.get("env", []):
            field = e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
            if field == "metadata.namespace":
                proc_env[e["name"]] = NAMESPACE
            elif field == "metadata.name":
                proc_env[e["name"]] = name
            elif "value" in e:
                proc_env[e["name"]] = e["value"]
        proc_env.update(env or {})
        server = WebhookServer(name, [self.binary, *args], proc_env, metrics_port, self.dir / f"{name}.log")
        self.servers.append(server)
        return server.start()

    def stop_servers(self) -> None:
        for s in self.servers:
            s.stop()


class WebhookServer:
    def __init__(self, name: str, cmd: list[str], env: dict[str, str], metrics_port: int, log: Path):
        self.name, self.cmd, self.env, self.metrics_port, self.log = name, cmd, env, metrics_port, log
        self.proc: subprocess.Popen | None = None
        self.signalled = False

    def start(self, ready_s: float = 60) -> "WebhookServer":
        self.signalled = False
        with open(self.log, "a") as f:
            self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=f, stderr=subprocess.STDOUT)
        wait_for(lambda: self.proc.poll() is None and self.get("/readyz")[0] == 200,
                 f"{self.name} to be ready (log {self.log})", ready_s)
        return self

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            with e:
                return e.code, e.read().decode()

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of `name` whose labels include `labels` (0 when there is none)."""
        total = 0.0
        for line in self.get("/metrics")[1].splitlines():
            if not line.startswith(name) or line.startswith("#"):
                continue
            head, _, value = line.rpartition(" ")
            metric, _, label_text = head.partition("{")
            if metric != name:
                continue
            if all(f'{k}="{v}"' in label_text for k, v in labels.items()):
                total += float(value)
        return total

    def terminate(self) -> None:
        """SIGTERM once, without waiting (the server keeps serving through its --shutdown-delay; a
        second signal would end it at once, exit 130)."""
        if self.proc is not None and self.proc.poll() is None and not self.signalled:
            self.proc.send_signal(signal.SIGTERM)
            self.signalled = True

    def stop(self, timeout_s: float = 30) -> int | None:
        """SIGTERM and wait for the exit code."""
        if self.proc is None:
            return None
        self.terminate()
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(5)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

