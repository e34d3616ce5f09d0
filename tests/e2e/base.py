"""The one base of the end-to-end scenarios: a fresh API server per scenario, the chart, the server.

After each scenario the API server's own admission metrics for the webhook are read and printed: a
rejection or a fail-open is a test failure (the webhook must never be the reason a write failed or
went through unmutated).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import unittest
from pathlib import Path

import yaml

import cluster
from cluster import wait_for
from install import KNATIVE, POLICY, ROOT, WEBHOOK_NAME, Install

GOVERNED = "knative-serving"


def governed_kinds() -> tuple[str, ...]:
    """The resources the chart's mutating webhook is sent (a subresource such as `deployments/scale`
    aside): the chart is held to the engine's declaration of its kinds by the Rust tests, so this list
    is read from it rather than copied."""
    chart = ROOT / "charts" / "knative-ha-webhook" / "templates" / "mutatingwebhookconfiguration.yaml"
    found = re.findall(r'resources: \["([a-z]+)"\]', chart.read_text())
    if not found:
        raise AssertionError(f"no resources found in the webhook rules of {chart}")
    return tuple(found)


GOVERNED_KINDS = governed_kinds()


def binary() -> str:
    b = os.environ.get("KHW_E2E_BINARY") or str(ROOT / "target" / "debug" / "knative-ha-webhook")
    if not Path(b).exists():
        raise AssertionError(f"no knative-ha-webhook binary at {b} (cargo build, or set KHW_E2E_BINARY)")
    return b


def webhook_metrics(text: str) -> dict:
    """The API server's admission metrics for the webhook `mutate.knativeha.dev`."""
    out = {"request_total": 0.0, "rejection_count": 0.0, "fail_open_count": 0.0, "duration_count": 0.0,
           "duration_sum": 0.0, "buckets": {}}
    label = f'name="{WEBHOOK_NAME}"'
    for line in text.splitlines():
        if line.startswith("#") or label not in line:
            continue
        head, _, value = line.rpartition(" ")
        name = head.split("{", 1)[0]
        v = float(value)
        if name == "apiserver_admission_webhook_request_total":
            out["request_total"] += v
        elif name == "apiserver_admission_webhook_rejection_count":
            out["rejection_count"] += v
        elif name == "apiserver_admission_webhook_fail_open_count":
            out["fail_open_count"] += v
        elif name == "apiserver_admission_webhook_admission_duration_seconds_count":
            out["duration_count"] += v
        elif name == "apiserver_admission_webhook_admission_duration_seconds_sum":
            out["duration_sum"] += v
        elif name == "apiserver_admission_webhook_admission_duration_seconds_bucket":
            le = re.search(r'le="([^"]+)"', head).group(1)
            out["buckets"][le] = out["buckets"].get(le, 0.0) + v
    return out


def summary(m: dict) -> str:
    mean = m["duration_sum"] / m["duration_count"] * 1000 if m["duration_count"] else 0.0
    buckets = " ".join(f"le{k}={int(v)}" for k, v in sorted(m["buckets"].items(), key=lambda kv: float(kv[0]))
                       if k in ("0.005", "0.025", "0.1", "0.5", "+Inf"))
    return (f"requests={int(m['request_total'])} rejections={int(m['rejection_count'])} "
            f"fail_open={int(m['fail_open_count'])} admissions={int(m['duration_count'])} mean={mean:.2f}ms [{buckets}]")


SUFFIX = {"m": 1e-3, "": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def quantity(text: str) -> float | None:
    """A Kubernetes resource quantity's value (the API server stores `1000m` as `1`)."""
    m = re.fullmatch(r"([0-9.]+(?:[eE][-+]?[0-9]+)?)(m|k|M|G|T|Ki|Mi|Gi|Ti)?", text)
    return float(m.group(1)) * SUFFIX[m.group(2) or ""] if m else None


def subset_diff(want, got, path: str = "") -> list[str]:
    """Where `got` does not hold `want` (dicts: every key of want; lists: same length, element-wise).

    Equal as the API server stores them: an empty value it omits (Go's omitempty), a quantity it
    normalises (`1000m` -> `1`)."""
    if got is None and want in ("", [], {}):
        return []
    if isinstance(want, dict):
        if not isinstance(got, dict):
            return [f"{path or '.'}: want an object, got {json.dumps(got)[:80]}"]
        return [d for k, v in want.items() for d in subset_diff(v, got.get(k), f"{path}.{k}")]
    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return [f"{path}: want {json.dumps(want)[:120]}, got {json.dumps(got)[:120]}"]
        return [d for i, (w, g) in enumerate(zip(want, got)) for d in subset_diff(w, g, f"{path}[{i}]")]
    if want == got or (".resources." in path and isinstance(want, str) and isinstance(got, str)
                       and quantity(want) is not None and quantity(want) == quantity(got)):
        return []
    return [f"{path}: want {json.dumps(want)}, got {json.dumps(got)}"]


class ClusterCase(unittest.TestCase):
    """A fresh API server for each scenario, the chart installed on it by `install_chart`."""

    # Scenarios that stop the webhook on purpose set this: their fail-opens are printed, not failures.
    FAIL_OPEN_EXPECTED = False

    def setUp(self):
        parent = os.environ.get("KHW_E2E_WORKDIR") or None  # scripts/check/e2e: one folder a run, removed when all pass
        self.workdir = tempfile.mkdtemp(prefix=f"{self._testMethodName}-", dir=parent)
        self.api = cluster.from_env(self.workdir)
        if self.api is None:
            self.skipTest(cluster.SKIP_LINE)
        self.api.start()
        self.kubectl = self.api.kubectl
        self.install = Install(self.api, binary(), self.workdir)

    def tearDown(self):
        m = None
        try:
            m = webhook_metrics(self.api.raw("/metrics"))
            print(f"\n  {self._testMethodName}: apiserver admission metrics for {WEBHOOK_NAME}: {summary(m)}")
        finally:
            self.install.stop_servers()
            self.api.stop()
        self.assertEqual(m["rejection_count"], 0, "the API server rejected writes because of the webhook")
        if not self.FAIL_OPEN_EXPECTED:
            self.assertEqual(m["fail_open_count"], 0, "the API server admitted writes the webhook did not answer")

    # -- steps ---------------------------------------------------------------------------------
    def install_chart(self, *sets: str, governed_namespace_first: bool = True):
        self.install.install(*sets, governed_namespace_first=governed_namespace_first)

    def start_server(self, name="webhook-0", **env):
        return self.install.start_server(name, {k: str(v) for k, v in env.items()})

    def apply_policy(self, text_or_path=str(POLICY), name="serving"):
        self.install.apply_policy(text_or_path, name)

    def wait_policy(self, name: str, status: str, reason: str | None = None, limit_s: float = 30) -> dict:
        return self.install.wait_policy(name, status, reason, limit_s)

    def probe_replicas(self) -> int:
        """spec.replicas of a server-side dry-run create of a 1-replica Deployment in the governed namespace,
        named as one of Knative's (policies govern Knative's Deployments only; `domain-mapping`, of older
        Serving releases, is not in v1.23.0's manifests, so it never exists here)."""
        out = self.kubectl.run("-n", GOVERNED, "create", "deployment", "domain-mapping", "--image=registry.k8s.io/pause:3.10",
                               "--replicas=1", "--dry-run=server", "-o", "json").stdout
        return json.loads(out)["spec"]["replicas"]

    def apply_knative(self, *files: Path, server_side: bool = False):
        return self.install.apply_knative(*files, server_side=server_side)

    def governed_objects(self) -> dict[tuple[str, str], dict]:
        out = {}
        for kind in GOVERNED_KINDS:
            for item in self.kubectl.json("-n", GOVERNED, kind)["items"]:
                out[(item["kind"], item["metadata"]["name"])] = item
        return out

    def governed_install(self, *sets: str, **env):
        """Chart, server, the example policy Ready, then Knative Serving v1.23.0 + HPA + Kourier."""
        self.install_chart(*sets)
        server = self.start_server(**env)
        self.install.govern()
        return server

    # -- the CLI ---------------------------------------------------------------------------------
    def cli(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([self.install.binary, *args], input=stdin, capture_output=True, text=True, timeout=120)

    def preview(self, *manifests: Path, policy=str(POLICY)) -> list[dict]:
        r = self.cli("preview", "--policy-file", policy, "-o", "json", *map(str, manifests))
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        return doc["items"] if doc.get("kind") == "List" else [doc]

    def audit(self, *args: str) -> subprocess.CompletedProcess:
        return self.cli("audit", "--kubeconfig", self.api.kubeconfig, "--request-timeout", "20s", *args)


def load_yaml(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


__all__ = ["ClusterCase", "GOVERNED", "KNATIVE", "subset_diff", "load_yaml", "wait_for", "webhook_metrics", "summary"]
