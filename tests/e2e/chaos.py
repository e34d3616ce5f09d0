"""A seeded chaos soak of the product on the simulated cluster (issue 50): the runner half.

The cluster is simcluster's: a real etcd, kube-apiserver, kube-scheduler and kube-controller-manager
(deployment, replicaset, disruption, HPA, statefulset, garbage-collector and namespace controllers) from
KUBEBUILDER_ASSETS, and fake kubelets (kubelet.py) for 6 nodes over 3 zones. On it:

- the chart, installed as the suite installs it (install.py: helm with the loopback post-renderer), governing
  knative-serving, kourier-system and knative-eventing, with a short `reconcile.interval` (--interval);
- the product as the chart runs it with TWO replicas: the built binary started twice with the rendered
  Deployment's args (each also runs the leader-elected reconciler), behind a small TCP proxy on the one
  loopback URL the API server calls (it stands for the Service's endpoints: each connection goes to a
  replica whose /readyz answered 200 at the last check, every 0.5 s; TLS passes through);
- examples/priorityclass.yaml and the recommended policies (examples/policy.yaml,
  examples/policies/kourier-system.yaml, examples/policies/knative-eventing.yaml), then Knative Serving +
  Kourier and Eventing (core, in-memory channel, MT channel broker) v1.20 from tests/fixtures, applied
  through the webhook (kubectl apply; Knative's own webhook configurations, and the objects only Knative's
  webhook could admit, left out: no process answers them).

Then a nemesis (random.Random(seed)) starts a fault every U(10, 40) s for `duration` seconds; faults may
overlap, each picks its target at random and ends by itself, giving back what it took:

  drain            kubectl drain's way: cordon, one Eviction per pod, 429 tried again 5 s later, 60 s at most, uncordon
  node_loss        one node NotReady and tainted unreachable, its pods deleted (as lose_zone); back after 30-90 s
  zone_loss        both nodes of a zone, the same; back after 30-90 s
  webhook_kill     SIGKILL of one replica, started again 5-30 s later
  leader_kill      the same, of the replica holding the reconcile Lease
  apiserver_restart  kube-apiserver stopped and started again (same port, certificates, etcd)
  policy_edit      a valid change of a recommended policy (replicas 3<->4, the PDB, the buckets), back 30-90 s later
  policy_invalid   an invalid version applied (expected refused, or admitted and reported invalid while the
                   last valid one stays in force), the valid one applied again 10-30 s later
  policy_recreate  a policy deleted, created again 5-20 s later
  upgrade/downgrade  Serving+Kourier, or Eventing, 1.20 <-> 1.23, client-side or server-side apply at random
  hpa_min          an HPA's minReplicas raised by 1-2, lowered back 30-90 s later
  priority_burst   pods of a higher PriorityClass than ordinary workloads (sim-burst, 1000: below the control
                   plane's) that fill the nodes, removed after 30 s
  eviction_storm   Evictions of every pod of one component at once, again every second for 20 s

TODO: the Knative Operator variant (Knative installed by the Operator's KnativeServing/KnativeEventing) is not
built.

A recorder writes the history (history.jsonl; /work/notes/chaos-history-schema.md, tests/e2e/chaos_check.py
reads it): samples twice a second, the API server's admission counters for the webhook every 2 s, `audit`
every 10 s, config-leader-election and the governed specs on change, the replicas' RSS every 5 s. After the
faults everything is given up to 3 min to settle, a final audit is recorded, and `chaos_check.check` runs
when that module exists (else a short summary of the history is printed).

    scripts/measure/chaos --seed 1 --duration 30m [--faults drain,zone_loss] [--out DIR]
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import random
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

import cluster
import simcluster
from base import webhook_metrics
from install import KNATIVE_WEBHOOK_GROUPS, NAMESPACE, ROOT, Install
from simcluster import LEFT_OUT, NODES, ZONES, SimCluster

FAULTS = ("drain", "node_loss", "zone_loss", "webhook_kill", "leader_kill", "apiserver_restart", "policy_edit",
          "policy_invalid", "policy_recreate", "upgrade", "hpa_min", "priority_burst", "eviction_storm")
# `upgrade` in --faults stands for both directions: each such fault goes to the other release of the
# product it picks, and is named `upgrade` (1.20 -> 1.23) or `downgrade` (1.23 -> 1.20) in the history.
FAULT_ALIASES = {"downgrade": "upgrade"}
GOVERNED = ("knative-serving", "kourier-system", "knative-eventing")
CONTROLLERS = simcluster.CONTROLLERS + ",statefulset"
REPLICAS = 2
LEASE = "knative-ha-webhook-reconcile"
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
DRAIN_S = 60
RETRY_S = 5
SETTLE_S = 180
STORM_S = 20
BURST_S = 30
APISERVER_GRACE_S = 10  # kube-apiserver's graceful stop keeps watches open until it is killed
KNATIVE_LE_DEFAULTS = {"lease-duration": 60.0, "renew-deadline": 40.0, "retry-period": 10.0}
LEGACY_LE_KEYS = {"lease-duration": "leaseDuration", "renew-deadline": "renewDeadline", "retry-period": "retryPeriod"}
TRANSIENT = ("connection refused", "connection reset", "EOF", "the server is currently unable", "TLS handshake timeout",
             "i/o timeout", "context deadline exceeded", "Client.Timeout", "http2: ", "ServiceUnavailable")


# -- small helpers ----------------------------------------------------------------------------------
def parse_duration(text: str) -> float:
    """`30m`, `90s`, `1h30m`, `2m30s` or plain seconds -> seconds."""
    if re.fullmatch(r"[0-9.]+", text):
        return float(text)
    v = go_duration(text)
    if v is None or v <= 0:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 30m, 90s, 1h)")
    return v


GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def go_duration(text) -> float | None:
    """Go's time.ParseDuration in seconds, or None where Go refuses it."""
    if not isinstance(text, str):
        return None
    s = text.strip() if text.strip() == text else None
    if not s:
        return None
    sign = -1.0 if s[0] == "-" else 1.0
    if s[0] in "+-":
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        return None
    total, pos = 0.0, 0
    for m in re.finditer(r"((?:\d+(?:\.\d*)?|\.\d+))(ns|us|µs|μs|ms|s|m|h)", s):
        if m.start() != pos:
            return None
        total += float(m.group(1)) * GO_UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s) or pos == 0:
        return None
    return sign * total


def leader_election_valid(data: dict | None) -> tuple[bool, str]:
    """config-leader-election as knative.dev/pkg's leaderelection.NewConfigFromConfigMap and client-go's
    NewLeaderElector would take it: each duration a Go duration (the kebab-case key over the legacy
    camelCase one; Knative's defaults 60s/40s/10s for a missing key), renew-deadline < lease-duration,
    renew-deadline > 1.2 x retry-period (client-go's JitterFactor), every duration > 0; buckets an
    integer 1..10 (default 1)."""
    if data is None:
        return True, "no ConfigMap: Knative's defaults"
    values = {}
    for key, default in KNATIVE_LE_DEFAULTS.items():
        raw = data.get(key, data.get(LEGACY_LE_KEYS[key]))
        if raw is None:
            values[key] = default
            continue
        v = go_duration(raw)
        if v is None:
            return False, f"{key}: {raw!r} is not a Go duration"
        values[key] = v
    for key, v in values.items():
        if v <= 0:
            return False, f"{key}: {v}s is not positive"
    if not values["renew-deadline"] < values["lease-duration"]:
        return False, f"renew-deadline {values['renew-deadline']}s is not below lease-duration {values['lease-duration']}s"
    if not values["renew-deadline"] > 1.2 * values["retry-period"]:
        return False, f"renew-deadline {values['renew-deadline']}s is not above 1.2 x retry-period {values['retry-period']}s"
    raw = data.get("buckets")
    if raw is not None:
        if not re.fullmatch(r"[0-9]+", str(raw)):
            return False, f"buckets: {raw!r} is not an unsigned integer"
        if not 1 <= int(raw) <= 10:
            return False, f"buckets: {raw} not in 1..10"
    return True, "ok"


def spec_hash(spec) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


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


# -- the history -------------------------------------------------------------------------------------
class History:
    """history.jsonl: one JSON object per line, written through one lock, flushed at once."""

    def __init__(self, path: Path):
        self.path = path
        self.lock = threading.Lock()
        self.t0 = time.monotonic()
        self.f = open(path, "w")
        self.closed = False

    def t(self) -> float:
        return round(time.monotonic() - self.t0, 3)

    def write(self, type_: str, **fields) -> dict:
        line = {"t": self.t(), "type": type_, **fields}
        with self.lock:
            if not self.closed:
                self.f.write(json.dumps(line, default=str) + "\n")
                self.f.flush()
        return line

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.f.close()


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


# -- two replicas behind one address ---------------------------------------------------------------------
class Replicas:
    """The webhook replicas: their servers, listen ports, /readyz state (checked every 0.5 s) and which
    fault holds each (killed)."""

    def __init__(self, install: Install, names: list[str]):
        self.install = install
        self.names = names
        self.servers: dict = {}
        self.ports: dict[str, int] = {}
        self.up: dict[str, bool] = {n: False for n in names}
        self.held: dict[str, int] = {}  # replica -> fault id that killed it
        self.lock = threading.Lock()
        self.restarts: dict[str, int] = {n: 0 for n in names}
        self._halt = threading.Event()
        self._rr = 0

    def start(self) -> None:
        for n in self.names:
            self.ports[n] = cluster.free_port()
            self.servers[n] = self.install.start_server(n, port=self.ports[n])
        threading.Thread(target=self._check, daemon=True, name="readyz").start()

    def _ready(self, name: str) -> bool:
        s = self.servers.get(name)
        if s is None or s.proc is None or s.proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{s.metrics_port}/readyz", timeout=0.4) as r:
                return r.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def _check(self) -> None:
        while not self._halt.is_set():
            for n in self.names:
                self.up[n] = self._ready(n)
            self._halt.wait(0.5)

    def count_up(self) -> int:
        return sum(1 for n in self.names if self.up[n])

    def backends(self) -> list[int]:
        """Ports of the replicas up, round robin."""
        ups = [self.ports[n] for n in self.names if self.up[n]]
        if not ups:
            return []
        self._rr += 1
        k = self._rr % len(ups)
        return ups[k:] + ups[:k]

    def kill(self, name: str) -> None:
        s = self.servers[name]
        if s.proc is not None and s.proc.poll() is None:
            s.proc.send_signal(signal.SIGKILL)
            s.proc.wait(10)
        self.up[name] = False

    def restart(self, name: str) -> None:
        s = self.servers[name]
        if s.proc is not None and s.proc.poll() is None:  # an earlier start that never got ready
            s.proc.kill()
            s.proc.wait(10)
        s.start(ready_s=90)
        self.restarts[name] += 1

    def stop(self) -> None:
        self._halt.set()
        for s in self.servers.values():
            s.stop()


class Proxy(threading.Thread):
    """The webhook Service's endpoints: a TCP proxy on the URL's port that sends each connection to a
    replica that is up (TLS passes through and ends at the replica); no replica up: the connection is
    closed at once (the API server then fails open, as with a Service without endpoints)."""

    def __init__(self, port: int, replicas: Replicas):
        super().__init__(daemon=True, name="webhook-proxy")
        self.replicas = replicas
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(128)
        self.sock.settimeout(0.5)
        self._halt = threading.Event()
        self.refused = 0
        self.forwarded = 0

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                break
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        conn.settimeout(None)
        upstream = None
        for port in self.replicas.backends():
            try:
                upstream = socket.create_connection(("127.0.0.1", port), 1)
                upstream.settimeout(None)
                break
            except OSError:
                upstream = None
        if upstream is None:
            self.refused += 1
            conn.close()
            return
        self.forwarded += 1

        def pump(src: socket.socket, dst: socket.socket) -> None:
            try:
                while True:
                    data = src.recv(65536)
                    if not data:
                        break
                    dst.sendall(data)
            except OSError:
                pass
            finally:
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass

        t = threading.Thread(target=pump, args=(upstream, conn), daemon=True)
        t.start()
        pump(conn, upstream)
        t.join()
        conn.close()
        upstream.close()

    def stop(self) -> None:
        self._halt.set()
        self.sock.close()


# -- the recorder ---------------------------------------------------------------------------------------
class Recorder:
    """Threads that each write history lines (History's lock)."""

    def __init__(self, run: "ChaosRun"):
        self.run = run
        self.h = run.history
        self.http = run.http
        self._halt = threading.Event()
        self.threads: list[threading.Thread] = []
        self.errors: dict[str, int] = {}
        self.min_ready: dict[str, int] = {}
        self._le_seen: dict[str, str] = {}
        self.last_audit: tuple[float, int] | None = None  # (t, rc)
        self._spec_seen: dict[str, str | None] = {}

    def start(self) -> None:
        for name, fn, every in (("sample", self.sample, 0.5), ("admission", self.admission, 2.0),
                                ("audit", self.audit, 10.0), ("leader-election", self.leader_election, 1.0),
                                ("spec", self.specs, 1.0), ("product", self.product, 5.0)):
            t = threading.Thread(target=self._loop, args=(name, fn, every), daemon=True, name=f"rec-{name}")
            t.start()
            self.threads.append(t)

    def _loop(self, name: str, fn, every: float) -> None:
        while not self._halt.is_set():
            start = time.monotonic()
            try:
                fn()
            except Exception as e:  # noqa: BLE001 - the API server away, a race: counted, next round
                self.errors[name] = self.errors.get(name, 0) + 1
                if self.errors[name] <= 3:
                    self.run.log(f"recorder {name}: {type(e).__name__}: {str(e)[:200]}")
            self._halt.wait(max(0.05, every - (time.monotonic() - start)))

    def stop(self) -> None:
        self._halt.set()
        for t in self.threads:
            t.join(30)

    # what each thread records
    def sample(self) -> None:
        deployments = self.http.get("/apis/apps/v1/deployments", timeout=5)["items"]
        pods = self.http.get("/api/v1/pods", timeout=5)["items"]
        nodes = self.http.get("/api/v1/nodes", timeout=5)["items"]
        lost = set(self.run.sim.lost)
        want = {f"{d['metadata']['namespace']}/{d['metadata']['name']}": d["spec"].get("replicas", 1)
                for d in deployments if d["metadata"]["namespace"] in GOVERNED}
        ready = {k: 0 for k in want}
        pending = {k: 0 for k in want}
        oldest = {k: 0.0 for k in want}
        bound_lost = {k: 0 for k in want}
        by_zone = {k: {z: 0 for z in ZONES} for k in want}
        for p in pods:
            k = component_of(p)
            if k not in want:
                continue
            node = p["spec"].get("nodeName")
            terminating = bool(p["metadata"].get("deletionTimestamp"))
            if node in lost:
                bound_lost[k] += 1
            if terminating:
                continue
            if pod_ready(p) and p.get("status", {}).get("phase") == "Running" and node not in lost:
                ready[k] += 1
                if node in NODES:
                    by_zone[k][NODES[node]] += 1
            elif p.get("status", {}).get("phase") == "Pending":
                pending[k] += 1
                oldest[k] = max(oldest[k], round(created_age_s(p), 1))
        for k, n in ready.items():
            self.min_ready[k] = min(self.min_ready.get(k, n), n)
        # on_lost: the pods bound to a lost node, and those the simulated taint eviction already deleted
        # from a node still lost (a real cluster keeps them bound there for their tolerationSeconds), the
        # latter only as far as the component is still short of them (replacements ready elsewhere count)
        deleted = self.run.nemesis.deleted_by_losses() if self.run.nemesis is not None else {}
        on_lost = {k: bound_lost[k] + min(deleted.get(k, 0), max(0, want[k] - ready[k] - bound_lost[k])) for k in want}
        self.h.write("sample", ready=ready, want=want, pending=pending, pending_oldest_s=oldest, on_lost=on_lost,
                     nodes_ready=sum(1 for n in nodes if node_ready(n)), nodes_total=len(nodes),
                     webhooks_up=self.run.replicas.count_up(), nodes_lost=sorted(lost), bound_on_lost=bound_lost,
                     deleted_from_lost={k: v for k, v in deleted.items() if k in want}, ready_by_zone=by_zone)

    def admission(self) -> None:
        code, text = self.http.call("GET", "/metrics", timeout=5)
        if code != 200:
            raise AssertionError(f"GET /metrics: {code}")
        m = webhook_metrics(text)
        self.h.write("admission", requests=m["request_total"], rejections=m["rejection_count"],
                     fail_open=m["fail_open_count"], webhooks_up=self.run.replicas.count_up(),
                     apiserver_epoch=self.run.apiserver_epoch)

    def audit(self, final: bool = False) -> dict:
        up = self.run.replicas.count_up()
        try:
            r = subprocess.run([self.run.binary, "audit", "--kubeconfig", self.run.sim.plane.kubeconfig,
                                "--request-timeout", "20s"], capture_output=True, text=True, timeout=60)
            rc, out = r.returncode, (r.stdout + r.stderr)
        except subprocess.TimeoutExpired:
            rc, out = -1, "audit timed out after 60 s"
        fields = {"rc": rc, "out": out[-4000:], "webhooks_up": up,
                  "restarts": dict(self.run.replicas.restarts)}
        if final:
            fields["final"] = True
        line = self.h.write("audit", **fields)
        self.last_audit = (line["t"], rc)
        return line

    def leader_election(self) -> None:
        items = self.http.get("/api/v1/configmaps?fieldSelector=metadata.name%3Dconfig-leader-election", timeout=5)["items"]
        present = {}
        for cm in items:
            ns = cm["metadata"]["namespace"]
            if ns in GOVERNED:
                present[ns] = {k: v for k, v in (cm.get("data") or {}).items() if k != "_example"}
        for ns in GOVERNED:
            data = present.get(ns)
            key = json.dumps(data, sort_keys=True)
            if self._le_seen.get(ns) != key:
                self._le_seen[ns] = key
                valid, why = leader_election_valid(data)
                self.h.write("leader_election_config", ns=ns, data=data, valid=valid, why=why, present=data is not None)

    def specs(self) -> None:
        seen_now = {}
        for kind, path in (("Deployment", "/apis/apps/v1/deployments"),
                           ("HorizontalPodAutoscaler", "/apis/autoscaling/v2/horizontalpodautoscalers"),
                           ("PodDisruptionBudget", "/apis/policy/v1/poddisruptionbudgets")):
            for o in self.http.get(path, timeout=5)["items"]:
                ns = o["metadata"]["namespace"]
                if ns not in GOVERNED:
                    continue
                key = f"{kind}/{ns}/{o['metadata']['name']}"
                h = spec_hash(o["spec"])
                seen_now[key] = h
                if self._spec_seen.get(key) != h:
                    self._spec_seen[key] = h
                    extra = {}
                    if kind == "Deployment":
                        extra["replicas"] = o["spec"].get("replicas")
                    elif kind == "HorizontalPodAutoscaler":
                        extra["min"], extra["max"] = o["spec"].get("minReplicas"), o["spec"].get("maxReplicas")
                    else:
                        extra["budget"] = {f: o["spec"][f] for f in ("minAvailable", "maxUnavailable") if f in o["spec"]}
                    self.h.write("spec", object=key, hash=h, generation=o["metadata"].get("generation"), **extra)
        for key in list(self._spec_seen):
            if key not in seen_now and self._spec_seen[key] is not None:
                self._spec_seen[key] = None
                self.h.write("spec", object=key, hash=None, generation=None, deleted=True)

    def product(self) -> None:
        for n, s in self.run.replicas.servers.items():
            alive = s.proc is not None and s.proc.poll() is None
            rss = 0
            if alive:
                try:
                    status = Path(f"/proc/{s.proc.pid}/status").read_text()
                    rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))
                except (OSError, AttributeError):
                    alive = False
            self.h.write("product", replica=n, rss_kib=rss, up=alive, ready=self.run.replicas.up[n],
                         pid=s.proc.pid if s.proc else None)


# -- the nemesis ----------------------------------------------------------------------------------------
class Busy:
    """Targets held by running faults (nodes, replicas, policies, products, components, HPAs)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.held: dict[str, int] = {}

    def take(self, keys: list[str], fid: int) -> bool:
        with self.lock:
            if any(k in self.held for k in keys):
                return False
            for k in keys:
                self.held[k] = fid
            return True

    def free(self, keys: list[str]) -> None:
        with self.lock:
            for k in keys:
                self.held.pop(k, None)

    def is_held(self, key: str) -> bool:
        with self.lock:
            return key in self.held


class Skip(Exception):
    """No target is free for this fault now."""


class Nemesis:
    def __init__(self, run: "ChaosRun", seed: int, faults: list[str], duration_s: float):
        self.run = run
        self.h = run.history
        self.http = run.http
        self.kubectl = run.sim.kubectl
        self.rng = random.Random(seed)
        self.faults = faults
        self.duration_s = duration_s
        self.busy = Busy()
        self.threads: list[threading.Thread] = []
        self.next_id = 0
        self.started: list[dict] = []
        self.ended: list[dict] = []
        self.apiserver_lock = threading.Lock()
        self._halt = threading.Event()
        self.release = {"serving": FIRST_RELEASE, "eventing": FIRST_RELEASE}
        self.lost_by: dict[str, set[int]] = {}  # node -> fault ids that took it down
        # fault id -> pods per component the simulated taint eviction deleted from its lost nodes
        self.lost_deleted: dict[int, dict[str, int]] = {}
        self.lost_lock = threading.Lock()

    # -- the schedule --
    def run_schedule(self) -> None:
        start = time.monotonic()
        while not self._halt.is_set():
            wait = self.rng.uniform(10, 40)
            if time.monotonic() - start + wait >= self.duration_s:
                self._halt.wait(max(0.0, self.duration_s - (time.monotonic() - start)))
                break
            if self._halt.wait(wait):
                break
            fault = self.rng.choice(self.faults)
            self.next_id += 1
            fid = self.next_id
            frng = random.Random(self.rng.random())
            t = threading.Thread(target=self._run_fault, args=(fid, fault, frng), daemon=True, name=f"fault-{fid}")
            t.start()
            self.threads.append(t)

    def stop(self) -> None:
        self._halt.set()

    def join(self, limit_s: float = 600) -> list[int]:
        deadline = time.monotonic() + limit_s
        for t in self.threads:
            t.join(max(0.1, deadline - time.monotonic()))
        return [int(t.name.split("-")[1]) for t in self.threads if t.is_alive()]

    def _run_fault(self, fid: int, fault: str, rng: random.Random) -> None:
        fn = getattr(self, f"f_{fault}")
        state = {"id": fid, "fault": fault, "started": False, "keys": []}
        try:
            ok, detail = fn(fid, rng, state)
        except Skip as e:
            self.h.write("note", text=f"fault {fid} {fault} skipped: {e}", fault_id=fid, fault=fault, skipped=True)
            self.run.log(f"fault {fid} {fault}: skipped ({e})")
            return
        except Exception as e:  # noqa: BLE001 - recorded as a failed fault
            ok, detail = False, {"error": f"{type(e).__name__}: {str(e)[:500]}", "trace": traceback.format_exc()[-1500:]}
            if not state["started"]:
                self._start(fid, state.get("name", fault), "?", {}, state)
        finally:
            self.busy.free(state["keys"])
        line = self.h.write("fault_end", id=fid, fault=state.get("name", fault), ok=ok, detail=detail)
        self.ended.append(line)
        self.run.log(f"fault {fid} {state.get('name', fault)} ended ok={ok} {json.dumps(detail, default=str)[:300]}")

    def _start(self, fid: int, fault: str, target: str, detail: dict, state: dict) -> None:
        state["started"] = True
        state["name"] = fault
        line = self.h.write("fault_start", id=fid, fault=fault, target=target, detail=detail)
        self.started.append(line)
        self.run.log(f"fault {fid} {fault} -> {target} {json.dumps(detail, default=str)[:200]}")

    def _hold(self, state: dict, keys: list[str], fid: int) -> bool:
        if self.busy.take(keys, fid):
            state["keys"] += keys
            return True
        return False

    def until_ok(self, what: str, fn, limit_s: float = 300, every_s: float = 2) -> bool:
        """Runs `fn` (a restore step) until it returns a true value without raising, or `limit_s` passes."""
        deadline = time.monotonic() + limit_s
        last = None
        while time.monotonic() < deadline:
            try:
                if fn():
                    return True
            except Exception as e:  # noqa: BLE001
                last = e
            time.sleep(every_s)
        self.run.log(f"restore step failed: {what}: {last}")
        return False

    # -- nodes --
    def live_nodes(self) -> list[str]:
        return [n for n in NODES if n not in self.run.sim.lost]

    def lose(self, fid: int, nodes: list[str]) -> None:
        with self.lost_lock:
            for n in nodes:
                self.lost_by.setdefault(n, set()).add(fid)
            self.run.sim.kubelets.lose(nodes)
        self.delete_pods_on(nodes, fid)

    def delete_pods_on(self, nodes: list[str], fid: int) -> int:
        """The pods bound to `nodes` deleted at once (the taint eviction, toleration run out); counted per
        component for the samples' on_lost while the nodes stay lost."""
        n = 0
        pods = self.http.get("/api/v1/pods")["items"]
        for p in pods:
            if p["spec"].get("nodeName") in nodes:
                ns, name = p["metadata"]["namespace"], p["metadata"]["name"]
                code, _ = self.http.call("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}", {"gracePeriodSeconds": 0})
                k = component_of(p)
                if code == 200 and k and not p["metadata"].get("deletionTimestamp"):
                    with self.lost_lock:
                        by = self.lost_deleted.setdefault(fid, {})
                        by[k] = by.get(k, 0) + 1
                n += 1
        return n

    def deleted_by_losses(self) -> dict[str, int]:
        """Pods per component deleted from nodes that are still lost (losses not ended)."""
        out: dict[str, int] = {}
        with self.lost_lock:
            for by in self.lost_deleted.values():
                for k, n in by.items():
                    out[k] = out.get(k, 0) + n
        return out

    def back(self, fid: int, nodes: list[str]) -> list[str]:
        """The nodes a fault took down serve again (Ready, untainted) unless another fault still holds them."""
        restored = []
        with self.lost_lock:
            self.lost_deleted.pop(fid, None)
            for n in nodes:
                holders = self.lost_by.get(n, set())
                holders.discard(fid)
                if holders:
                    continue
                kub = self.run.sim.kubelets

                def up(n=n) -> bool:
                    code, text = self.http.merge(f"/api/v1/nodes/{n}", {"spec": {"taints": None}})
                    if code != 200:
                        raise AssertionError(f"untaint {n}: {code} {text[:200]}")
                    kub._status(n, ready=True)
                    return True

                self.until_ok(f"node {n} back", up)
                kub.lost.discard(n)
                restored.append(n)
        return restored

    def hold_lost(self, fid: int, nodes: list[str], seconds: float) -> None:
        """While the nodes are down, pods the scheduler still bound there are deleted too (every 5 s)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(min(5, max(0.1, end - time.monotonic())))
            try:
                self.delete_pods_on(nodes, fid)
            except Exception:  # noqa: BLE001 - the API server away
                pass

    def f_node_loss(self, fid, rng, state):
        candidates = [n for n in self.live_nodes() if not self.busy.is_held(f"node:{n}")]
        if not candidates:
            raise Skip("no live node")
        node = rng.choice(sorted(candidates))
        if not self._hold(state, [f"node:{node}"], fid):
            raise Skip(f"{node} held")
        back_s = rng.uniform(30, 90)
        self._start(fid, "node_loss", node, {"nodes": [node], "back_after_s": round(back_s, 1)}, state)
        self.lose(fid, [node])
        self.hold_lost(fid, [node], back_s)
        restored = self.back(fid, [node])
        return True, {"nodes": [node], "restored": restored}

    def f_zone_loss(self, fid, rng, state):
        zones = [z for z in ZONES if all(n in self.live_nodes() and not self.busy.is_held(f"node:{n}")
                                         for n, zz in NODES.items() if zz == z)]
        if not zones:
            raise Skip("no zone with both nodes up")
        zone = rng.choice(zones)
        nodes = [n for n, z in NODES.items() if z == zone]
        if not self._hold(state, [f"node:{n}" for n in nodes], fid):
            raise Skip(f"{zone} held")
        back_s = rng.uniform(30, 90)
        self._start(fid, "zone_loss", zone, {"nodes": nodes, "back_after_s": round(back_s, 1)}, state)
        self.lose(fid, nodes)
        self.hold_lost(fid, nodes, back_s)
        restored = self.back(fid, nodes)
        return True, {"nodes": nodes, "restored": restored}

    # -- evictions --
    def evict(self, fid: int, ns: str, name: str, uid: str | None = None) -> tuple[int, str]:
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns}}
        if uid:
            body["deleteOptions"] = {"preconditions": {"uid": uid}}
        code, text = self.http.call("POST", f"/api/v1/namespaces/{ns}/pods/{name}/eviction", body)
        if code:
            msg = ""
            if code != 201:
                try:
                    msg = json.loads(text).get("message", "")[:300]
                except ValueError:
                    msg = text[:300]
            self.h.write("eviction", pod=f"{ns}/{name}", code=code, fault_id=fid, **({"message": msg} if msg else {}))
        return code, text

    def f_drain(self, fid, rng, state):
        candidates = [n for n in self.live_nodes() if not self.busy.is_held(f"node:{n}")
                      and not self.busy.is_held(f"drain:{n}")]
        if not candidates:
            raise Skip("no node to drain")
        node = rng.choice(sorted(candidates))
        if not self._hold(state, [f"drain:{node}"], fid):
            raise Skip(f"{node} held")
        self._start(fid, "drain", node, {"nodes": [node]}, state)
        t0 = time.monotonic()
        deadline = t0 + DRAIN_S
        counts: dict[str, int] = {"201": 0, "429": 0, "500": 0}
        blocked: set[str] = set()
        errors: list[str] = []
        lock = threading.Lock()
        self.until_ok(f"cordon {node}", lambda: self.http.merge(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": True}})[0] == 200, 60)
        pods = [p for p in self.http.get("/api/v1/pods")["items"] if p["spec"].get("nodeName") == node
                and not p["metadata"].get("deletionTimestamp")
                and not any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences") or [])]

        def one(p: dict) -> None:
            ns, name, uid = p["metadata"]["namespace"], p["metadata"]["name"], p["metadata"]["uid"]
            while time.monotonic() < deadline:
                code, text = self.evict(fid, ns, name, uid)
                with lock:
                    if code:
                        counts[str(code)] = counts.get(str(code), 0) + 1
                if code == 201:
                    break
                if code == 429:
                    for m in re.finditer(r"[Tt]he disruption budget ([a-z0-9.-]+)", text):
                        with lock:
                            blocked.add(f"{ns}/{m.group(1)}")
                    time.sleep(RETRY_S)
                    continue
                if code in (404, 409):  # gone, or replaced under the same name
                    return
                if code == 0:  # the API server away: kubectl's own retry
                    time.sleep(1)
                    continue
                with lock:  # kubectl drain gives up on this pod (and fails) on any other answer
                    errors.append(f"{ns}/{name}: {code} {text[:200]}")
                return
            else:
                return

            def gone() -> bool:
                code, text = self.http.call("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
                return code == 404 or (code == 200 and json.loads(text)["metadata"]["uid"] != uid)

            cluster.wait_for_bool(gone, max(0.5, deadline - time.monotonic()), 0.25)

        threads = [threading.Thread(target=one, args=(p,), daemon=True) for p in pods]
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(0.1, deadline - time.monotonic()) + 25)
        uids = {p["metadata"]["uid"] for p in pods}
        left = []
        try:
            left = [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in self.http.get("/api/v1/pods")["items"]
                    if p["spec"].get("nodeName") == node and p["metadata"]["uid"] in uids]
        except AssertionError as e:
            errors.append(str(e)[:200])
        done = not left and not errors
        self.until_ok(f"uncordon {node}", lambda: self.http.merge(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": False}})[0] == 200)
        return done, {"nodes": [node], "done": done, "blocked_by": sorted(blocked), "evictions": counts, "pods": len(pods),
                      "left": left, "errors": errors, "seconds": round(time.monotonic() - t0, 1)}

    def components(self, min_replicas: int = 2) -> dict[str, dict]:
        out = {}
        for d in self.http.get("/apis/apps/v1/deployments")["items"]:
            if d["metadata"]["namespace"] in GOVERNED and d["spec"].get("replicas", 1) >= min_replicas:
                out[f"{d['metadata']['namespace']}/{d['metadata']['name']}"] = d
        return out

    def f_eviction_storm(self, fid, rng, state):
        comps = {k: d for k, d in self.components().items() if not self.busy.is_held(f"storm:{k}")}
        if not comps:
            raise Skip("no component with 2 replicas or more")
        key = rng.choice(sorted(comps))
        if not self._hold(state, [f"storm:{key}"], fid):
            raise Skip(f"{key} held")
        ns = key.split("/")[0]
        labels = comps[key]["spec"]["selector"].get("matchLabels", {})
        selector = urllib.parse.quote(",".join(f"{k}={v}" for k, v in labels.items()))
        self._start(fid, "eviction_storm", key, {"selector": labels, "seconds": STORM_S}, state)
        counts: dict[str, int] = {}
        lock = threading.Lock()
        end = time.monotonic() + STORM_S
        rounds = 0
        while time.monotonic() < end:
            rounds += 1
            try:
                pods = [p for p in self.http.get(f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}")["items"]
                        if not p["metadata"].get("deletionTimestamp")]
            except AssertionError:
                time.sleep(1)
                continue

            def one(p):
                code, _ = self.evict(fid, ns, p["metadata"]["name"])
                with lock:
                    counts[str(code)] = counts.get(str(code), 0) + 1

            threads = [threading.Thread(target=one, args=(p,), daemon=True) for p in pods]
            for t in threads:
                t.start()
            for t in threads:
                t.join(25)
            time.sleep(1)
        return counts.get("500", 0) == 0, {"component": key, "rounds": rounds, "evictions": counts}

    # -- the webhook replicas --
    def kill_replica(self, fid, rng, state, fault: str, name: str) -> tuple[bool, dict]:
        reps = self.run.replicas
        down_s = rng.uniform(5, 30)
        self._start(fid, fault, name, {"replica": name, "restart_after_s": round(down_s, 1),
                                       "webhooks_up_before": reps.count_up()}, state)
        reps.kill(name)
        time.sleep(down_s)
        ok = self.until_ok(f"restart {name}", lambda: reps.restart(name) or True, 300, 5)
        return ok, {"replica": name, "restarted": ok, "down_s": round(down_s, 1)}

    def f_webhook_kill(self, fid, rng, state):
        names = [n for n in self.run.replicas.names if not self.busy.is_held(f"replica:{n}")]
        if not names:
            raise Skip("every replica is down")
        name = rng.choice(names)
        if not self._hold(state, [f"replica:{name}"], fid):
            raise Skip(f"{name} held")
        return self.kill_replica(fid, rng, state, "webhook_kill", name)

    def leader(self) -> str | None:
        code, text = self.http.call("GET", f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}")
        if code != 200:
            return None
        return json.loads(text)["spec"].get("holderIdentity")

    def f_leader_kill(self, fid, rng, state):
        name = self.leader()
        if name not in self.run.replicas.names:
            raise Skip(f"the reconcile Lease is held by {name!r}, no replica of this run")
        if not self._hold(state, [f"replica:{name}"], fid):
            raise Skip(f"the leader {name} is down already")
        return self.kill_replica(fid, rng, state, "leader_kill", name)

    def f_apiserver_restart(self, fid, rng, state):
        if not self.apiserver_lock.acquire(blocking=False):
            raise Skip("the API server is restarting")
        try:
            down_s = rng.uniform(0, 5)
            grace_s = APISERVER_GRACE_S
            self._start(fid, "apiserver_restart", "kube-apiserver", {"down_s": round(down_s, 1), "grace_s": grace_s}, state)
            took = self.run.sim.plane.restart_apiserver(down_s, grace_s=grace_s)
            self.run.apiserver_epoch += 1
            return True, {"seconds": round(took, 1), "down_s": round(down_s, 1)}
        finally:
            self.apiserver_lock.release()

    # -- policies --
    def apply_policy(self, fid: int | None, name: str, text: str, what: str, expect_refused: bool = False) -> subprocess.CompletedProcess:
        r = self.kubectl.run("apply", "-f", "-", stdin=text, check=False, timeout=60)
        fields = {"expect_refused": True} if expect_refused else {}
        self.h.write("apply", what=what, rc=r.returncode, stderr=r.stderr[-2000:], fault_id=fid, policy=name,
                     transient=transient(r.stderr), **fields)
        return r

    def apply_policy_retrying(self, fid, name: str, text: str, what: str) -> bool:
        """A policy applied back: tried again (and recorded each time) while the API server is away."""
        deadline = time.monotonic() + 180
        while True:
            r = self.apply_policy(fid, name, text, what)
            if r.returncode == 0 or not transient(r.stderr) or time.monotonic() > deadline:
                return r.returncode == 0
            time.sleep(3)

    def policy_ready(self, name: str, limit_s: float = 30) -> dict | None:
        """The policy's Ready condition at its generation (or None by `limit_s`)."""
        def cond():
            hap = json.loads(self.kubectl.run("get", "highavailabilitypolicy", name, "-o", "json").stdout)
            gen = hap["metadata"].get("generation")
            for c in hap.get("status", {}).get("conditions", []):
                if c["type"] == "Ready" and c.get("observedGeneration", gen) == gen:
                    return {k: c.get(k) for k in ("status", "reason", "message")}
            return None

        try:
            return cluster.wait_for(cond, f"policy {name} Ready", limit_s, 1)
        except AssertionError:
            return None

    def pick_policy(self, fid, rng, state, needs_le: bool = False) -> str:
        names = [n for n in POLICIES if not self.busy.is_held(f"policy:{n}")
                 and (not needs_le or "leaderElection" in self.run.policy_docs[n]["spec"])]
        if not names:
            raise Skip("every policy is held")
        name = rng.choice(names)
        if not self._hold(state, [f"policy:{name}"], fid):
            raise Skip(f"policy {name} held")
        return name

    def f_policy_edit(self, fid, rng, state):
        name = self.pick_policy(fid, rng, state)
        doc = json.loads(json.dumps(self.run.policy_docs[name]))
        spec = doc["spec"]
        edits = ["replicas", "pdb"] + (["buckets"] if "leaderElection" in spec else [])
        edit = rng.choice(edits)
        if edit == "replicas":
            spec["replicas"] = 4 if spec.get("replicas", 3) == 3 else 3
            change = {"replicas": [self.run.policy_docs[name]["spec"].get("replicas"), spec["replicas"]]}
        elif edit == "pdb":
            spec["podDisruptionBudget"] = rng.choice([{"maxUnavailable": 2}, {"minAvailable": "50%"}, {"maxUnavailable": "34%"}])
            change = {"podDisruptionBudget": [self.run.policy_docs[name]["spec"].get("podDisruptionBudget"), spec["podDisruptionBudget"]]}
        else:
            spec["leaderElection"]["buckets"] = rng.choice([b for b in (1, 3, 7, 10) if b != spec["leaderElection"].get("buckets")])
            change = {"buckets": [self.run.policy_docs[name]["spec"]["leaderElection"].get("buckets"), spec["leaderElection"]["buckets"]]}
        back_s = rng.uniform(30, 90)
        self._start(fid, "policy_edit", name, {"edit": edit, "change": change, "back_after_s": round(back_s, 1)}, state)
        r = self.apply_policy(fid, name, yaml.safe_dump(doc), f"policy {name} edit {edit}")
        ready1 = self.policy_ready(name) if r.returncode == 0 else None
        time.sleep(back_s)
        ok_back = self.apply_policy_retrying(fid, name, yaml.safe_dump(self.run.policy_docs[name]), f"policy {name} back")
        ready2 = self.policy_ready(name) if ok_back else None
        ok = r.returncode == 0 and ok_back and (ready1 or {}).get("status") == "True" and (ready2 or {}).get("status") == "True"
        return ok, {"edit": edit, "change": change, "rc": r.returncode, "ready_after_edit": ready1, "ready_after_back": ready2}

    def f_policy_invalid(self, fid, rng, state):
        name = self.pick_policy(fid, rng, state)
        doc = json.loads(json.dumps(self.run.policy_docs[name]))
        spec = doc["spec"]
        kinds = ["replicas-0", "pdb-both"] + (["renew-over-lease", "buckets-11"] if "leaderElection" in spec else [])
        kind = rng.choice(kinds)
        if kind == "replicas-0":
            spec["replicas"] = 0
        elif kind == "pdb-both":
            spec["podDisruptionBudget"] = {"maxUnavailable": 1, "minAvailable": 1}
        elif kind == "renew-over-lease":
            spec["leaderElection"]["renewDeadline"] = "90s"
        else:
            spec["leaderElection"]["buckets"] = 11
        back_s = rng.uniform(10, 30)
        self._start(fid, "policy_invalid", name, {"invalid": kind, "webhooks_up": self.run.replicas.count_up()}, state)
        r = self.apply_policy(fid, name, yaml.safe_dump(doc), f"policy {name} invalid {kind}", expect_refused=True)
        refused = r.returncode != 0
        cond = None
        if not refused:  # admitted (the validating webhook not answering): must be reported invalid
            time.sleep(5)
            cond = self.policy_ready(name, 20)
        time.sleep(back_s)
        ok_back = self.apply_policy_retrying(fid, name, yaml.safe_dump(self.run.policy_docs[name]), f"policy {name} back")
        ready = self.policy_ready(name) if ok_back else None
        ok = (refused or (cond or {}).get("status") == "False") and ok_back and (ready or {}).get("status") == "True"
        return ok, {"invalid": kind, "refused": refused, "stderr": r.stderr[-500:], "condition_if_admitted": cond,
                    "ready_after_back": ready}

    def f_policy_recreate(self, fid, rng, state):
        name = self.pick_policy(fid, rng, state)
        gap_s = rng.uniform(5, 20)
        self._start(fid, "policy_recreate", name, {"recreate_after_s": round(gap_s, 1)}, state)
        r = self.kubectl.run("delete", "highavailabilitypolicy", name, "--wait=true", check=False, timeout=60)
        time.sleep(gap_s)
        ok_back = self.apply_policy_retrying(fid, name, yaml.safe_dump(self.run.policy_docs[name]), f"policy {name} re-created")
        ready = self.policy_ready(name) if ok_back else None
        ok = r.returncode == 0 and ok_back and (ready or {}).get("status") == "True"
        return ok, {"delete_rc": r.returncode, "delete_stderr": r.stderr[-300:], "ready_after_create": ready}

    # -- releases --
    def f_upgrade(self, fid, rng, state):
        products = [p for p in ("serving", "eventing") if not self.busy.is_held(f"release:{p}")]
        if not products:
            raise Skip("both products are being upgraded")
        product = rng.choice(products)
        if not self._hold(state, [f"release:{product}"], fid):
            raise Skip(f"{product} held")
        frm = self.release[product]
        to = "1.23" if frm == "1.20" else "1.20"
        how = rng.choice(["client-side", "server-side"])
        fault = "upgrade" if to > frm else "downgrade"
        self._start(fid, fault, product, {"from": frm, "to": to, "how": how}, state)
        rcs = []
        for path in self.run.release_files(product, to):
            what = f"{product} {frm}->{to} {path.parent.name}/{path.name}"
            deadline = time.monotonic() + 180
            while True:  # the API server away: kubectl again, each attempt recorded
                rc, stderr = self.run.apply_release(path, how, fid, what)
                if rc == 0 or not transient(stderr) or time.monotonic() > deadline:
                    break
                time.sleep(3)
            rcs.append(rc)
        self.release[product] = to
        rollouts = self.run.rollouts(PRODUCT_NAMESPACES[product], 240)
        ok = all(rc == 0 for rc in rcs) and all(rollouts.values())
        return ok, {"from": frm, "to": to, "how": how, "rcs": rcs,
                    "rollouts_not_done": sorted(k for k, v in rollouts.items() if not v)}

    f_downgrade = f_upgrade

    # -- capacity --
    def f_hpa_min(self, fid, rng, state):
        hpas = {}
        for ns in GOVERNED:
            for h in self.http.get(f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers")["items"]:
                key = f"{ns}/{h['metadata']['name']}"
                if not self.busy.is_held(f"hpa:{key}"):
                    hpas[key] = h
        if not hpas:
            raise Skip("no HPA free")
        key = rng.choice(sorted(hpas))
        if not self._hold(state, [f"hpa:{key}"], fid):
            raise Skip(f"{key} held")
        ns, name = key.split("/")
        before = hpas[key]["spec"]
        raised = before.get("minReplicas", 1) + rng.randint(1, 2)
        back_s = rng.uniform(30, 90)
        path = f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers/{name}"
        self._start(fid, "hpa_min", key, {"min": [before.get("minReplicas", 1), raised], "max": before["maxReplicas"],
                                          "back_after_s": round(back_s, 1)}, state)
        code, text = self.http.merge(path, {"spec": {"minReplicas": raised, "maxReplicas": max(before["maxReplicas"], raised)}})
        after = json.loads(text)["spec"] if code == 200 else {}
        time.sleep(back_s)
        restored = self.until_ok(f"{key} minReplicas back", lambda: self.http.merge(path, {"spec": {
            "minReplicas": before.get("minReplicas", 1), "maxReplicas": before["maxReplicas"]}})[0] == 200, 180)
        return code == 200 and restored, {"code": code, "stored_after_raise": {k: after.get(k) for k in ("minReplicas", "maxReplicas")},
                                          "restored": restored}

    def f_priority_burst(self, fid, rng, state):
        if not self._hold(state, ["burst"], fid):
            raise Skip("a burst is running")
        live = self.live_nodes()
        replicas = len(live) + rng.randint(0, 2)
        cpu = rng.choice(["2500m", "3", "3500m"])
        name = f"burst-{fid}"
        self._start(fid, "priority_burst", name, {"replicas": replicas, "cpu": cpu, "priority": 1000, "seconds": BURST_S}, state)
        dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
               "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": {
                   "metadata": {"labels": {"app": name, "chaos": "burst"}},
                   "spec": {"priorityClassName": "sim-burst", "containers": [{
                       "name": "burst", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": cpu}}}]}}}}
        r = self.kubectl.run("apply", "-f", "-", stdin=json.dumps(dep), check=False, timeout=60)
        time.sleep(BURST_S)
        placed = 0
        try:
            placed = sum(1 for p in self.http.get(f"/api/v1/namespaces/default/pods?labelSelector=app%3D{name}")["items"]
                         if p.get("status", {}).get("phase") == "Running")
        except AssertionError:
            pass
        removed = self.until_ok(f"delete {name}", lambda: self.kubectl.run(
            "-n", "default", "delete", "deployment", name, "--ignore-not-found", "--wait=false", check=False, timeout=60).returncode == 0)
        # its pods go with the garbage collector; deleted at once here (the capacity back)
        self.until_ok(f"{name} pods gone", lambda: self.kubectl.run(
            "-n", "default", "delete", "pods", "-l", f"app={name}", "--grace-period=0", "--force", "--wait=false",
            check=False, timeout=60).returncode == 0, 60)
        return r.returncode == 0 and removed, {"created_rc": r.returncode, "running_after_s": placed, "removed": removed}


# -- the run ---------------------------------------------------------------------------------------------
class ChaosRun:
    def __init__(self, seed: int, duration_s: float, faults: list[str], out: Path, binary: str,
                 interval_s: int = 30, start_s: float = 2.0, terminating_s: float = 2.0, settle_s: float = SETTLE_S):
        self.seed = seed
        self.duration_s = duration_s
        self.faults = faults
        self.out = out
        self.binary = binary
        self.interval_s = interval_s
        self.start_s = start_s
        self.terminating_s = terminating_s
        self.settle_s = settle_s
        self.apiserver_epoch = 0
        self.out.mkdir(parents=True, exist_ok=True)
        self.workdir = self.out / "work"
        self.workdir.mkdir(exist_ok=True)
        self.history_path = self.out / "history.jsonl"
        self.logf = open(self.out / "chaos.log", "a")
        self.loglock = threading.Lock()
        self.sim = None
        self.replicas = None
        self.proxy = None
        self.recorder = None
        self.nemesis = None
        self.history = None
        self.policy_docs = {n: yaml.safe_load(p.read_text()) for n, p in POLICIES.items()}

    def log(self, text: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {text}"
        with self.loglock:
            print(line, flush=True)
            self.logf.write(line + "\n")
            self.logf.flush()

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

    # -- the phases --
    def setup(self) -> None:
        t = time.monotonic()
        self.log(f"chaos: seed {self.seed}, {self.duration_s:.0f}s of faults {','.join(self.faults)}; work dir {self.workdir}")
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
        audit = lambda: subprocess.run([self.binary, "audit", "--kubeconfig", self.sim.plane.kubeconfig,  # noqa: E731
                                        "--request-timeout", "20s"], capture_output=True, timeout=60).returncode == 0
        in_line = cluster.wait_for_bool(audit, self.interval_s + 60, 3)
        self.install_s = time.monotonic() - t
        self.log(f"audit in line before the faults: {in_line}")
        self.log(f"installed in {self.install_s:.0f}s ({'settled' if ok else 'NOT settled'}): {self.status()}")

    def run(self) -> Path:
        try:
            self.setup()
            self.history = History(self.history_path)
            components = {k: v for k, v in sorted(self.status()["want"].items())}
            self.history.write("run", seed=self.seed, duration_s=self.duration_s, faults=self.faults, binary=self.binary,
                               started=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                               components=components, interval_s=self.interval_s, replicas=self.replicas.names,
                               nodes=dict(NODES), releases={"serving": FIRST_RELEASE, "eventing": FIRST_RELEASE},
                               workdir=str(self.workdir), install_s=round(self.install_s, 1))
            self.recorder = Recorder(self)
            self.recorder.start()
            self.nemesis = Nemesis(self, self.seed, self.faults, self.duration_s)
            self.nemesis.run_schedule()
            self.log(f"faults over ({self.nemesis.next_id} started); waiting for the running ones to end")
            stuck = self.nemesis.join(600)
            if stuck:
                self.history.write("note", text=f"faults still running after 600 s: {stuck}")
            self.history.write("note", text="faults over", phase="settle")
            t = time.monotonic()
            settled = cluster.wait_for_bool(self.settled, self.settle_s, 2)
            self.history.write("note", text=f"settled={settled} after {time.monotonic() - t:.1f}s", phase="settle",
                               settled=settled, settle_s=round(time.monotonic() - t, 1))
            self.log(f"settled={settled} in {time.monotonic() - t:.0f}s")
            # the reconciler's next pass: an audit in line (exit 0) after the settle, or interval + 45 s
            since = self.history.t()
            in_line = cluster.wait_for_bool(lambda: self.recorder.last_audit is not None and self.recorder.last_audit[0] > since
                                            and self.recorder.last_audit[1] == 0, self.interval_s + 45, 1)
            self.log(f"audit in line after the settle: {in_line}")
            self.recorder.audit(final=True)
            self.recorder.stop()
            self.history.write("note", text="end", phase="end", proxy={"forwarded": self.proxy.forwarded, "refused": self.proxy.refused},
                               recorder_errors=self.recorder.errors)
        finally:
            self.teardown()
        return self.history_path

    def teardown(self) -> None:
        if self.recorder is not None:
            self.recorder.stop()
        if self.nemesis is not None:
            self.nemesis.stop()
        if self.history is not None:
            self.history.close()
        if self.replicas is not None:
            self.replicas.stop()
        if self.proxy is not None:
            self.proxy.stop()
        if self.sim is not None:
            self.sim.stop()


# -- after the run ------------------------------------------------------------------------------------
def summary(history_path: Path) -> str:
    """A short summary of a history (without chaos_check)."""
    lines = [json.loads(ln) for ln in history_path.read_text().splitlines() if ln.strip()]
    run = next((ln for ln in lines if ln["type"] == "run"), {})
    out = [f"history {history_path}: {len(lines)} lines, seed {run.get('seed')}, {run.get('duration_s')}s"]
    starts = [ln for ln in lines if ln["type"] == "fault_start"]
    ends = {ln["id"]: ln for ln in lines if ln["type"] == "fault_end"}
    out.append(f"faults: {len(starts)}")
    for s in starts:
        e = ends.get(s["id"], {})
        out.append(f"  {s['t']:7.1f}-{e.get('t', float('nan')):7.1f}s #{s['id']:<3} {s['fault']:<18} {s['target']:<34} ok={e.get('ok')}")
    minimum: dict[str, int] = {}
    for ln in lines:
        if ln["type"] == "sample":
            for k, v in ln["ready"].items():
                minimum[k] = min(minimum.get(k, v), v)
    comps = run.get("components", {})
    out.append("fewest ready: " + ", ".join(f"{k.split('/')[1]} {minimum.get(k)}/{w}" for k, w in comps.items()))
    codes: dict[int, int] = {}
    for ln in lines:
        if ln["type"] == "eviction":
            codes[ln["code"]] = codes.get(ln["code"], 0) + 1
    out.append(f"evictions by code: {dict(sorted(codes.items()))}")
    bad_applies = [ln for ln in lines if ln["type"] == "apply" and ln["rc"] != 0 and not ln.get("expect_refused")]
    out.append(f"applies failed: {len(bad_applies)}" + "".join(f"\n  {a['t']}s {a['what']}: {a['stderr'][-200:]!r}" for a in bad_applies))
    adm = [ln for ln in lines if ln["type"] == "admission"]
    fo = rej = 0.0
    prev = None
    for a in adm:  # counters restart with the API server
        if prev is not None and a.get("apiserver_epoch") == prev.get("apiserver_epoch"):
            fo += max(0.0, a["fail_open"] - prev["fail_open"])
            rej += max(0.0, a["rejections"] - prev["rejections"])
        elif prev is not None:
            fo += a["fail_open"]
            rej += a["rejections"]
        prev = a
    out.append(f"admission: fail_open +{fo:.0f}, rejections +{rej:.0f}")
    audits = [ln for ln in lines if ln["type"] == "audit"]
    out.append(f"audits: {len(audits)}, rc counts {dict(sorted({a['rc']: sum(1 for b in audits if b['rc'] == a['rc']) for a in audits}.items()))}, "
               f"final rc {audits[-1]['rc'] if audits else None}")
    le_bad = [ln for ln in lines if ln["type"] == "leader_election_config" and not ln["valid"]]
    out.append(f"config-leader-election invalid: {len(le_bad)}")
    return "\n".join(out)


def check(history_path: Path):
    """chaos_check.check(history) when that module exists: (its result, its report text); else (None, None)."""
    try:
        import chaos_check  # noqa: PLC0415 - another engineer's module, optional
    except ImportError:
        return None, None
    result = chaos_check.check(str(history_path))
    return result, report_text(result)


def report_text(result) -> str:
    for attr in ("report", "text"):
        v = getattr(result, attr, None)
        if isinstance(v, str):
            return v
        if callable(v):
            try:
                out = v()
                if isinstance(out, str):
                    return out
            except TypeError:
                pass
    if isinstance(result, dict):
        return result.get("report") or json.dumps(result, indent=1, default=str)
    if isinstance(result, (tuple, list)) and result and isinstance(result[-1], str):
        return result[-1]
    return str(result)


def breaches(result) -> int:
    """How many breaches chaos_check's result holds (its `breaches` list or count, a dict's, a list's length)."""
    for b in (getattr(result, "breaches", None), result.get("breaches") if isinstance(result, dict) else None):
        if b is not None:
            return b if isinstance(b, int) else len(b)
    if isinstance(result, int):
        return result
    if isinstance(result, (list, tuple)):
        first = result[0] if result else []
        return first if isinstance(first, int) else len(first) if isinstance(first, (list, tuple)) else len(result)
    raise AssertionError(f"cannot read the breaches of chaos_check's result: {result!r}"[:300])


def faults_arg(text: str) -> list[str]:
    names = [FAULT_ALIASES.get(f.strip(), f.strip()) for f in text.split(",") if f.strip()]
    unknown = [f for f in names if f not in FAULTS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown faults {unknown} (known: {', '.join(FAULTS)}, downgrade)")
    return list(dict.fromkeys(names))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/measure/chaos", description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--duration", type=parse_duration, default=parse_duration("30m"), help="how long faults are injected (30m, 90s)")
    ap.add_argument("--faults", type=faults_arg, default=list(FAULTS), help=f"comma-separated subset of {','.join(FAULTS)}")
    ap.add_argument("--out", type=Path, default=None, help="where history.jsonl, chaos.log and work/ go (default: a new temp dir)")
    ap.add_argument("--interval", type=int, default=30, help="the chart's reconcile.interval in seconds (default 30)")
    args = ap.parse_args(argv)
    if not simcluster.assets_ready():
        print(simcluster.SKIP_LINE)
        return 0
    from base import binary  # noqa: PLC0415 - KHW_E2E_BINARY or target/debug
    out = args.out or Path(os.environ.get("KHW_E2E_WORKDIR") or "/tmp") / f"khw-chaos-seed{args.seed}-{time.strftime('%Y%m%d-%H%M%S')}"
    run = ChaosRun(args.seed, args.duration, args.faults, out.resolve(), binary(), interval_s=args.interval)
    path = run.run()
    print(f"\nhistory: {path}\nwork dir: {run.workdir}", flush=True)
    result, text = check(path)
    if text is None:
        print(summary(path))
        return 0
    print(text)
    try:
        return 1 if breaches(result) else 0
    except AssertionError as e:
        print(e)
        return 0


if __name__ == "__main__":
    sys.exit(main())
