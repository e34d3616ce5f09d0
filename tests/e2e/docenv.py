"""A cluster for the docs' cluster blocks (scripts/check/doc-test --cluster): one API server, prepared as the
block's marker says (`empty`, `knative`, `installed` or `governed`), and the environment its shell commands run in."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import cluster
from install import ROOT, SERVING_CORE, SERVING_HPA, Install, helm_bin

HELM_SHIM = """#!/usr/bin/env bash
# The suite's stand-in for kube-proxy: helm install|upgrade render the webhook with a loopback URL.
case "${1:-}" in
  install|upgrade) exec "%(helm)s" "$@" --post-renderer "%(renderer)s" ;;
  *) exec "%(helm)s" "$@" ;;
esac
"""


class DocCluster:
    def __init__(self, binary: str, setup: str):
        self.setup = setup
        self.dir = tempfile.mkdtemp(prefix=f"doc-{setup}-", dir=os.environ.get("KHW_E2E_WORKDIR") or None)
        self.api = cluster.from_env(self.dir)
        if self.api is None:
            raise SystemExit(cluster.SKIP_LINE)
        self.api.start()
        self.install = Install(self.api, binary, self.dir)
        if setup == "knative":
            self.api.kubectl.run("create", "namespace", "knative-serving")
        if setup in ("installed", "governed"):
            self.install.install()
            self.install.start_server()
        if setup == "governed":
            self.install.govern()
            # Governed means in line: the reconciler's pass that settles after the release's apply has
            # created the budgets of the Deployments that ship none.
            audit = [binary, "audit", "--kubeconfig", self.api.kubeconfig, "--request-timeout", "20s"]
            cluster.wait_for(lambda: subprocess.run(audit, capture_output=True, timeout=60).returncode == 0,
                             "the governed release in line (knative-ha-webhook audit exit 0)", 90, 1)
        self.bin = Path(self.dir) / "bin"
        self.bin.mkdir()
        shim = self.bin / "helm"
        shim.write_text(HELM_SHIM % {"helm": shutil.which(helm_bin()) or helm_bin(),
                                     "renderer": ROOT / "tests" / "e2e" / "loopback-webhook"})
        shim.chmod(0o755)
        # $KNATIVE: the release's files under their download names, as the suite applies them.
        self.release = Path(self.dir) / "release"
        self.release.mkdir()
        for name, f in zip(("serving-core.yaml", "serving-hpa.yaml"),
                           self.install.knative_files(SERVING_CORE, SERVING_HPA)):
            shutil.copy(f, self.release / name)

    def env(self, base: dict[str, str]) -> dict[str, str]:
        e = dict(base)
        e.update({k: v for k, v in self.install.env().items() if k.startswith(("KUBECONFIG", "KHW_E2E_"))})
        e["PATH"] = f"{self.bin}:{e['PATH']}"
        e["REGISTRY"] = "registry.test/you"
        e["KNATIVE"] = str(self.release)
        return e

    def close(self) -> None:
        self.install.stop_servers()
        self.api.stop()
