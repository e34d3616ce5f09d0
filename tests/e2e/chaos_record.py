"""The chaos soak's record (chaos.py): the history writer (history.jsonl, one JSON object a line;
/work/notes/chaos-history-schema.md, read by chaos_check.py) and the recorder's threads: samples twice a
second, the API server's admission counters for the webhook every 2 s, `audit` every 10 s,
config-leader-election and the governed specs on change, the replicas' RSS every 5 s.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from pathlib import Path
from typing import Callable

from base import webhook_metrics
from chaos_stage import GOVERNED, Stage, component_of, created_age_s, node_ready, pod_ready
from simcluster import NODES, ZONES

KNATIVE_LE_DEFAULTS = {"lease-duration": 60.0, "renew-deadline": 40.0, "retry-period": 10.0}
LEGACY_LE_KEYS = {"lease-duration": "leaseDuration", "renew-deadline": "renewDeadline", "retry-period": "retryPeriod"}
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


# -- the recorder ---------------------------------------------------------------------------------------
class Recorder:
    """Threads that each write history lines (History's lock); `deleted_by_losses` is the nemesis's count of
    the pods the simulated taint eviction deleted from nodes still lost (empty before it starts)."""

    def __init__(self, stage: Stage, history: History, log: Callable[[str], None],
                 deleted_by_losses: Callable[[], dict[str, int]]):
        self.stage = stage
        self.h = history
        self.http = stage.http
        self.log = log
        self.deleted_by_losses = deleted_by_losses
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
                    self.log(f"recorder {name}: {type(e).__name__}: {str(e)[:200]}")
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
        lost = set(self.stage.sim.lost)
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
        deleted = self.deleted_by_losses()
        on_lost = {k: bound_lost[k] + min(deleted.get(k, 0), max(0, want[k] - ready[k] - bound_lost[k])) for k in want}
        self.h.write("sample", ready=ready, want=want, pending=pending, pending_oldest_s=oldest, on_lost=on_lost,
                     nodes_ready=sum(1 for n in nodes if node_ready(n)), nodes_total=len(nodes),
                     webhooks_up=self.stage.replicas.count_up(), nodes_lost=sorted(lost), bound_on_lost=bound_lost,
                     deleted_from_lost={k: v for k, v in deleted.items() if k in want}, ready_by_zone=by_zone)

    def admission(self) -> None:
        code, text = self.http.call("GET", "/metrics", timeout=5)
        if code != 200:
            raise AssertionError(f"GET /metrics: {code}")
        m = webhook_metrics(text)
        self.h.write("admission", requests=m["request_total"], rejections=m["rejection_count"],
                     fail_open=m["fail_open_count"], webhooks_up=self.stage.replicas.count_up(),
                     apiserver_epoch=self.stage.apiserver_epoch)

    def audit(self, final: bool = False) -> dict:
        up = self.stage.replicas.count_up()
        rc, out = self.stage.audit()
        fields = {"rc": rc, "out": out[-4000:], "webhooks_up": up,
                  "restarts": dict(self.stage.replicas.restarts)}
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
        for n, s in self.stage.replicas.servers.items():
            alive = s.proc is not None and s.proc.poll() is None
            rss = 0
            if alive:
                try:
                    status = Path(f"/proc/{s.proc.pid}/status").read_text()
                    rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))
                except (OSError, AttributeError):
                    alive = False
            self.h.write("product", replica=n, rss_kib=rss, up=alive, ready=self.stage.replicas.up[n],
                         pid=s.proc.pid if s.proc else None)

