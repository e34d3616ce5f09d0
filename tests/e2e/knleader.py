"""Replicas of a knative.dev/pkg controller on this machine, and the Leases they elect leaders with.

``KHW_KNATIVE_LEADER`` names a binary running knative.dev/pkg's ``sharedmain.MainWithContext(ctx,
"knleader", ...)`` with one leader-aware no-op controller (work queue ``noop``): with Knative's
bucketed leader election its Leases are ``knleader.noop.NN-of-MM`` in ``SYSTEM_NAMESPACE``, and it logs
knative's own ``"<id>" has started leading "<lease>"`` and its own ``promoted bucket <lease>`` /
``demoted bucket <lease>``. It reads ``config-leader-election`` once, at start. Each replica here is
one process with its own log file; its identity (``<hostname>_<uuid>``, the Leases' holderIdentity)
is read from knative's ``will run in leader-elected mode with id "<id>"`` line.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from cluster import Kubectl, free_port, wait_for

ENV = "KHW_KNATIVE_LEADER"
SKIP_LINE = (
    "real leader election: skipped: set KHW_KNATIVE_LEADER to a knative.dev/pkg sharedmain binary and "
    "KUBEBUILDER_ASSETS (docs/testing.md)"
)
STARTED_LEADING = re.compile(r'^"(?P<id>[^"]+)" has started leading "(?P<lease>[^"]+)"$')
IDENTITY = re.compile(r'will run in leader-elected mode with id "(?P<id>[^"]+)"')


def binary() -> str | None:
    """The knative.dev/pkg binary, or None when the environment names no runnable one."""
    b = os.environ.get(ENV)
    return b if b and os.access(b, os.X_OK) else None


def assets() -> str | None:
    """KUBEBUILDER_ASSETS when it holds kube-apiserver and etcd, else None."""
    d = os.environ.get("KUBEBUILDER_ASSETS")
    if d and all((Path(d) / exe).exists() for exe in ("kube-apiserver", "etcd")):
        return d
    return None


def messages(text: str) -> list[str]:
    """The messages of a replica's log: knative's JSON lines (`message`, or `msg` for the fallback
    logger) and the plain lines before logging is configured."""
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                entry = json.loads(line)
            except ValueError:
                out.append(line)
                continue
            out.append(str(entry.get("message", entry.get("msg", ""))))
        else:
            out.append(line)
    return out


class Replica:
    """One knative-leader process in `namespace`, logging to `<logdir>/<name>.log`."""

    def __init__(self, binary_path: str, name: str, namespace: str, kubeconfig: str, logdir: str, *args: str):
        self.name = name
        self.namespace = namespace
        self.log_path = Path(logdir) / f"{name}.log"
        env = dict(os.environ, SYSTEM_NAMESPACE=namespace, POD_NAME=name, PROFILING_PORT=str(free_port()),
                   KNLEADER_PROBES_PORT=str(free_port()))
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen([binary_path, f"--kubeconfig={kubeconfig}", *args], env=env,
                                     stdout=self._log, stderr=subprocess.STDOUT)
        self._identity: str | None = None

    def __repr__(self) -> str:
        return self.name

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def messages(self) -> list[str]:
        return messages(self.log())

    def identity(self, limit_s: float = 20) -> str:
        """The holderIdentity this replica writes into the Leases it holds."""
        if self._identity is None:
            def found():
                return next((m.group("id") for m in map(IDENTITY.search, self.messages()) if m), None)
            what = f"{self.name}'s leader-election identity in {self.log_path}"
            self._identity = wait_for(found, what, limit_s)
        return self._identity

    def started_leading(self) -> list[str]:
        """The Leases this replica logged `has started leading` for, in order."""
        ident = self.identity()
        out = []
        for msg in self.messages():
            m = STARTED_LEADING.match(msg)
            if m and m.group("id") == ident:
                out.append(m.group("lease"))
        return out

    def promoted(self) -> list[str]:
        """The buckets this replica logged `promoted bucket` for, in order."""
        prefix = "promoted bucket "
        return [m.removeprefix(prefix) for m in self.messages() if m.startswith(prefix)]

    def running(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.running():
            self.proc.send_signal(sig)

    def wait(self, limit_s: float) -> int | None:
        """The exit code, or None if still running after `limit_s`."""
        try:
            return self.proc.wait(limit_s)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        self._log.close()


def stop_all(replicas: list[Replica], grace_s: float = 10) -> None:
    """SIGTERM to every running replica, SIGKILL to those still running `grace_s` later."""
    for r in replicas:
        r.signal(signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for r in replicas:
        if r.wait(max(0.0, deadline - time.monotonic())) is None:
            r.signal(signal.SIGKILL)
            r.wait(5)
        r.close()


def leases(kubectl: Kubectl, namespace: str) -> dict[str, dict]:
    """The Leases of `namespace`: name -> spec."""
    items = kubectl.json("-n", namespace, "leases")["items"]
    return {item["metadata"]["name"]: item["spec"] for item in items}


def lease_names(buckets: int) -> list[str]:
    """The Leases of the `noop` queue with `buckets` buckets, as knative.dev/pkg names them."""
    return [f"knleader.noop.{i:02d}-of-{buckets:02d}" for i in range(buckets)]


def holder(kubectl: Kubectl, namespace: str, lease: str) -> str:
    """The Lease's holderIdentity ('' when released or absent)."""
    r = kubectl.run("-n", namespace, "get", "lease", lease, "-o", "jsonpath={.spec.holderIdentity}",
                    check=False)
    return r.stdout.strip() if r.returncode == 0 else ""
