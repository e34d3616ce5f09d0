"""The chaos soak's history as the checker reads it (chaos_check.py): its lines, samples and faults, with
the lookups the invariants share; the bounds they are held to, and a breach found in it.

A `run` line first, then one JSON object a line, each with `t` and `type` (chaos_check.py's docstring,
/work/notes/chaos-history-schema.md). A truncated last line is left out (the runner stopped mid-line).
Standard library only.
"""

from __future__ import annotations

import bisect
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

INVARIANTS: dict[str, str] = {
    "ready-floor": "1. every component keeps 2 ready (fewer only by its pods on lost nodes, or its want)",
    "repair": "2. once no node is lost, every component is back to ready == want within the bound",
    "pending": "3. no pod Pending longer than the bound while capacity exists",
    "eviction-500": "4. no Eviction answered 500 (two budgets over one pod)",
    "drain": "5. a drain the budgets allow finishes",
    "apply": "6. every Knative and policy apply succeeds (an invalid policy is refused)",
    "audit": "7. audit in line within the bound after the webhook returns and at the end of the run",
    "leader-election": "8. config-leader-election always valid",
    "spec-flips": "9. no object's spec flips",
    "admission": "10. no admission rejected; fail-open only while no webhook replica answered",
    "memory": "11. webhook memory flat over each process lifetime",
}


class HistoryError(ValueError):
    """The history cannot be read: not JSON (but a truncated last line), or no `run` line first."""


@dataclass(frozen=True)
class Bounds:
    """The tunable limits, with defaults for the simulated cluster (fake kubelets: pods Ready in about 1 s)."""

    floor: int = 2  # ready replicas every component wanting at least this many keeps
    repair_s: float = 90.0  # back to ready == want after capacity returns; also the floor's grace after a want change
    pending_s: float = 60.0  # longest Pending while capacity exists
    audit_slack_s: float = 30.0  # audit in line within the run's interval_s + this after the webhook is back
    flip_changes: int = 4  # more spec changes than this of one object ...
    flip_window_s: float = 60.0  # ... within this many seconds is a flip storm
    flip_after_s: float = 30.0  # spec changes until this long after a spec-changing fault ends are not counted
    fail_open_slack_s: float = 5.0  # a fail-open (or an invalid policy admitted) within this long of webhooks_up 0
    apiserver_back_s: float = 10.0  # an apply failing `transient` this long after an apiserver_restart ended
    memory_ratio: float = 1.5  # mean RSS of a lifetime's last third over its first third
    memory_warmup_s: float = 60.0  # the start of each process lifetime left out
    memory_min_span_s: float = 300.0  # lifetimes shorter than this (after the warm-up) are not judged
    excerpt_s: float = 10.0  # history lines this long either side of a breach


@dataclass
class Entry:
    """One history line: its line number, time, type, the object (empty for a sample: see Sample) and
    where its text is in the file (for the excerpts)."""

    n: int
    t: float
    type: str
    data: dict[str, Any]
    offset: int
    length: int


def _same(new: dict[str, Any], prev: dict[str, Any] | None) -> dict[str, Any]:
    """`new` with interned keys, or `prev` itself when equal: a long soak's samples mostly repeat, and
    sharing keeps its history in memory small."""
    if prev is not None and new == prev:
        return prev
    return {sys.intern(k): v for k, v in new.items()}


@dataclass
class Sample:
    """A `sample` line: per component (ns/name) its ready, wanted and Pending replicas, its oldest Pending
    pod's age and its pods on lost nodes; the nodes Ready of all; the webhook replicas answering /readyz."""

    t: float
    ready: dict[str, int]
    want: dict[str, int]
    pending: dict[str, int]
    oldest: dict[str, float]
    on_lost: dict[str, int]
    nodes_ready: int
    nodes_total: int
    webhooks_up: int

    @classmethod
    def of(cls, t: float, d: dict[str, Any], prev: Sample | None) -> Sample:
        def part(key: str, old: dict[str, Any] | None, drop_zero: bool) -> dict[str, Any]:
            new = {k: v for k, v in (d.get(key) or {}).items() if v or not drop_zero}
            return _same(new, old)
        return cls(t, part("ready", prev and prev.ready, False), part("want", prev and prev.want, False),
                   part("pending", prev and prev.pending, False), part("pending_oldest_s", prev and prev.oldest, True),
                   part("on_lost", prev and prev.on_lost, True), int(d.get("nodes_ready", 0)),
                   int(d.get("nodes_total", 0)), int(d.get("webhooks_up", 0)))

    def all_nodes_ready(self) -> bool:
        return self.nodes_ready >= self.nodes_total


@dataclass
class Fault:
    id: int
    kind: str
    target: str
    start: float
    step: int  # 1-based, in order of start
    end: float | None = None  # None: never ended in the history
    ok: bool | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    end_detail: dict[str, Any] = field(default_factory=dict)

    def until(self, horizon: float) -> float:
        return self.end if self.end is not None else horizon

    def label(self) -> str:
        return f"#{self.id} {self.kind} {self.target}".rstrip()


@dataclass
class Breach:
    invariant: str  # a key of INVARIANTS
    t: float
    subject: str  # component, object, pod, replica or node
    message: str
    faults: list[str]  # the faults active at t (labels), or what ended last
    excerpt: list[str]  # the history lines from t - excerpt_s to t + excerpt_s
    fault_id: int | None = None  # the fault the breach belongs to (drain, eviction, apply), if any

    def headline(self) -> str:
        return f"{self.invariant} at t={self.t:.1f}: {self.subject}: {self.message}"


class History:
    """The parsed history, sorted by time, with the lookups the checks share."""

    def __init__(self, path: Path) -> None:
        self.path = path
        entries, samples, self.truncated = _read(path)
        self.run = entries[0].data
        self.entries = sorted(entries, key=lambda e: (e.t, e.n))
        self.times = [e.t for e in self.entries]
        self.end = self.times[-1]
        self.interval_s = float(self.run.get("interval_s") or 0)
        self.by_type: dict[str, list[Entry]] = {}
        for e in self.entries:
            self.by_type.setdefault(e.type, []).append(e)
        self.samples = sorted(samples, key=lambda s: s.t)
        self.sample_times = [s.t for s in self.samples]
        self.faults = _faults(self.of("fault_start") + self.of("fault_end"))
        self.components = sorted(set(self.run.get("components") or {}).union(*(s.want for s in self.samples)))
        self.up_seen = sorted([(s.t, s.webhooks_up) for s in self.samples] +
                              [(e.t, int(e.data["webhooks_up"])) for e in self.of("admission") + self.of("audit")
                               if "webhooks_up" in e.data])
        self.up_times = [t for t, _ in self.up_seen]

    def of(self, kind: str) -> list[Entry]:
        return self.by_type.get(kind, [])

    def active(self, t: float, kinds: Iterable[str] | None = None) -> list[Fault]:
        wanted = set(kinds) if kinds is not None else None
        return [f for f in self.faults  # from fault_start until (not at) its fault_end
                if (wanted is None or f.kind in wanted) and f.start <= t and (f.end is None or t < f.end)]

    def overlapping(self, start: float, end: float, kinds: Iterable[str]) -> list[Fault]:
        wanted = set(kinds)
        return [f for f in self.faults if f.kind in wanted and f.start <= end and f.until(self.end) >= start]

    def sample_at(self, t: float) -> Sample | None:
        """The last sample at or before t, else the first one after it."""
        if not self.samples:
            return None
        i = bisect.bisect_right(self.sample_times, t)
        return self.samples[max(i - 1, 0)]

    def excerpt(self, t: float, around: float) -> list[str]:
        """The history's lines from t - around to t + around, as written."""
        lo = bisect.bisect_left(self.times, t - around)
        hi = bisect.bisect_right(self.times, t + around)
        with self.path.open("rb") as f:
            out = []
            for e in self.entries[lo:hi]:
                f.seek(e.offset)
                out.append(f.read(e.length).decode("utf-8", "replace").rstrip("\r\n"))
        return out

    def context(self, t: float) -> list[str]:
        """Labels of the faults active at t; with none, the one that ended last before t."""
        now = self.active(t)
        if now:
            return [f"{f.label()} (step {f.step}, since t={f.start:.1f})" for f in now]
        ended = [f for f in self.faults if f.end is not None and f.end <= t]
        if not ended:
            return []
        last = max(ended, key=lambda f: f.end or 0.0)
        return [f"none active; last {last.label()} (step {last.step}) ended at t={last.end:.1f}"]

    def webhooks_down_near(self, a: float, b: float, slack: float) -> bool:
        """Whether webhooks_up was 0 at some moment of [a - slack, b + slack] (a value holds until the next)."""
        lo = max(bisect.bisect_right(self.up_times, a - slack) - 1, 0)
        hi = bisect.bisect_right(self.up_times, b + slack)
        return any(up == 0 for _, up in self.up_seen[lo:hi])


def _read(path: Path) -> tuple[list[Entry], list[Sample], bool]:
    """Every line (a truncated last one left out: the runner stopped mid-line); samples parsed apart."""
    entries: list[Entry] = []
    samples: list[Sample] = []
    truncated = False
    offset = 0
    with path.open("rb") as f:
        for n, raw in enumerate(f, 1):
            at, offset = offset, offset + len(raw)
            if not raw.strip():
                continue
            try:
                data = json.loads(raw)
            except ValueError as err:
                if not raw.endswith(b"\n") and not f.read(1):
                    truncated = True
                    continue
                raise HistoryError(f"{path}:{n}: not JSON: {err}") from None
            if not isinstance(data, dict) or not isinstance(data.get("t"), (int, float)) or "type" not in data:
                raise HistoryError(f"{path}:{n}: not a history line (needs \"t\" and \"type\")")
            t, kind = float(data["t"]), str(data["type"])
            if kind == "sample":
                samples.append(Sample.of(t, data, samples[-1] if samples else None))
                data = {}
            entries.append(Entry(n, t, kind, data, at, len(raw)))
    if not entries or entries[0].type != "run":
        raise HistoryError(f"{path}: the first line is not the run line")
    return entries, samples, truncated


def _faults(entries: list[Entry]) -> list[Fault]:
    """The faults from their start and end lines (starts first), in order of start."""
    faults: dict[Any, Fault] = {}
    for e in entries:
        d = e.data
        if e.type == "fault_start":
            faults[d.get("id")] = Fault(d.get("id"), str(d.get("fault", "")), str(d.get("target", "")), e.t,
                                        len(faults) + 1, detail=dict(d.get("detail") or {}))
        elif e.type == "fault_end" and d.get("id") in faults:
            f = faults[d.get("id")]
            f.end, f.ok, f.end_detail = e.t, d.get("ok"), dict(d.get("detail") or {})
    return sorted(faults.values(), key=lambda f: (f.start, f.step))


def make_breach(h: History, b: Bounds, invariant: str, t: float, subject: str, message: str,
                fault_id: int | None = None) -> Breach:
    return Breach(invariant, t, subject, message, h.context(t), h.excerpt(t, b.excerpt_s), fault_id)

