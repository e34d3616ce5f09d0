"""Invariants over the recorded history of a seeded chaos soak (issue 50), and the report made from it.

The soak runner (`scripts/measure/chaos`, tests/e2e/chaos.py) records a simulated multi-zone cluster running
Knative Serving, Kourier and Eventing governed by the product, with two webhook replicas, while a nemesis
injects overlapping faults. The history is one JSON object a line, each with `t` (seconds since the run
started) and `type`: a `run` line first (seed, duration_s, faults, components with their wanted replicas,
interval_s), then `fault_start`/`fault_end`, `sample` (twice a second: ready, want, pending,
pending_oldest_s and on_lost per Deployment, nodes_ready/nodes_total, webhooks_up), `eviction`, `apply`,
`admission` (the API server's cumulative counters for the webhook), `audit`, `leader_election_config`,
`spec`, `product` (each replica's RSS) and `note` lines (docs/testing.md, "Chaos soak"). This module reads
it, checks the invariants below and makes the report:

    python3 tests/e2e/chaos_check.py HISTORY.jsonl    # prints the report; exit 1 on a breach, 2 on a bad history

    report = check("history.jsonl", bounds=Bounds(repair_s=120))
    report.breaches, report.figures, report.text()

Invariants (the keys of `INVARIANTS`; the limits are the fields of `Bounds`, their defaults in brackets):

 1 ready-floor   every component wanting 2 or more keeps 2 ready at every sample, less its pods on lost
                 nodes (never below 0); one wanting fewer keeps its want less those, once the repair bound
                 has passed since its want last changed (so does one first seen with its pods not yet up, or
                 scaled up from below 2). Rollouts (upgrade, downgrade, policy_edit) get no excuse.
 2 repair        once no node is lost, every component is back to ready == want within the repair bound
                 [90 s], counted from the latest of: capacity back, falling short, its want changing.
 3 pending       no pod Pending longer than [60 s] while capacity exists (all nodes Ready, no node or zone
                 loss, no priority_burst); its age counts from when capacity came back.
 4 eviction-500  no Eviction answered 500 (two budgets over one pod); 429 is fine.
 5 drain         a drain that ends not done is a breach, unless a node_loss, zone_loss, priority_burst or
                 eviction_storm overlapped it, or a component it evicted from (or whose budget blocked it)
                 was below its want at its start.
 6 apply         every apply exits 0, but a `transient` failure while an apiserver_restart runs (or within
                 [10 s] of its end); an expect_refused apply (policy_invalid) may fail, and must not be
                 admitted while a webhook replica answers.
 7 audit         after the webhook returns (webhooks_up 0 -> >= 1), an audit exits 0 within interval_s +
                 [30 s] of its last replica being back; the same after the last fault, and the run's last
                 audit exits 0 once that bound has passed (a run that ends sooner is reported not judged).
 8 leader-election  every config-leader-election observed is valid.
 9 spec-flips    no object's spec changes more than [4] times within [60 s], not counting changes during
                 policy_edit, policy_recreate, upgrade, downgrade or hpa_min and [30 s] after them.
10 admission     no admission rejected; fail-open only where webhooks_up was 0 within [5 s].
11 memory        per webhook process lifetime, after its first [60 s] and when [300 s] remain, the mean RSS
                 of its last third at most [1.5]x that of its first third.

Each breach names the invariant, the time, the component or object, the faults active then, and carries
the history's lines from [10 s] before to [10 s] after. Standard library only: it runs with plain
`python3 -m unittest` (test_chaos_check.py).
"""

from __future__ import annotations

import bisect
import json
import sys
from collections import Counter
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

LOSS = ("node_loss", "zone_loss")
# Faults that change specs on purpose: spec changes in their window (+ Bounds.flip_after_s) are not counted.
SPEC_CHANGERS = ("policy_edit", "policy_recreate", "upgrade", "downgrade", "hpa_min")
# Faults that excuse a drain that did not finish when they overlap it.
DRAIN_EXCUSES = ("node_loss", "zone_loss", "priority_burst", "eviction_storm")


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


def _breach(h: History, b: Bounds, invariant: str, t: float, subject: str, message: str,
            fault_id: int | None = None) -> Breach:
    return Breach(invariant, t, subject, message, h.context(t), h.excerpt(t, b.excerpt_s), fault_id)


@dataclass
class Stretch:
    """Consecutive samples in a bad state for one key: from `start` until `end` (the first good sample)."""

    key: str
    start: float
    end: float
    worst: float
    note: str

    @property
    def seconds(self) -> float:
        return self.end - self.start


class Stretches:
    """Open stretches per key; `observe` returns the stretch a good sample closes."""

    def __init__(self, low_is_worse: bool) -> None:
        self.open: dict[str, Stretch] = {}
        self.low_is_worse = low_is_worse

    def observe(self, key: str, t: float, bad: bool, value: float, note: str) -> Stretch | None:
        cur = self.open.get(key)
        if bad and cur is None:
            self.open[key] = Stretch(key, t, t, value, note)
        elif bad and cur is not None:
            cur.end = t
            if (value < cur.worst) if self.low_is_worse else (value > cur.worst):
                cur.worst, cur.note = value, note
        elif cur is not None:
            del self.open[key]
            cur.end = t
            return cur
        return None

    def close(self, keep: Iterable[str], t: float) -> list[Stretch]:
        """Close every open stretch whose key is not in `keep` (all of them with keep empty) at t."""
        kept = set(keep)
        done = [s for k, s in self.open.items() if k not in kept]
        for s in done:
            del self.open[s.key]
            s.end = max(s.end, t)
        return done


# 1. Ready floor -------------------------------------------------------------------------------------------

def check_ready_floor(h: History, b: Bounds) -> list[Breach]:
    hold_from: dict[str, float] = {}
    last_want: dict[str, int] = {}
    book = Stretches(low_is_worse=True)
    done: list[Stretch] = []
    for s in h.samples:
        done += book.close(s.want, s.t)  # a component gone from the sample (a downgrade removed it)
        for c, want in s.want.items():
            ready, lost = s.ready.get(c, 0), s.on_lost.get(c, 0)
            _hold_floor_from(hold_from, last_want, c, want, ready, s.t, b)
            floor = max(0, min(want, b.floor) - lost)
            bad = s.t >= hold_from[c] and ready < floor
            closed = book.observe(c, s.t, bad, ready, f"floor {floor}: want {want}, {lost} on lost nodes")
            if closed:
                done.append(closed)
    done += book.close((), h.end)
    return [_breach(h, b, "ready-floor", st.start, st.key,
                    f"{int(st.worst)} ready, below the {st.note}; {st.seconds:.1f} s below "
                    f"(t={st.start:.1f} to {st.end:.1f})") for st in done]


def _hold_floor_from(hold_from: dict[str, float], last_want: dict[str, int], c: str, want: int,
                     ready: int, t: float, b: Bounds) -> None:
    """When the floor starts to apply to c: at once, or the repair bound after a want change from or to
    below the floor (a component scaled on demand; a first sight before its pods are up counts as one)."""
    before = last_want.get(c)
    last_want[c] = want
    if before is None:
        hold_from[c] = t if ready >= min(want, b.floor) else t + b.repair_s
    elif want != before and min(want, before) < b.floor:
        hold_from[c] = t + b.repair_s


# 2. Repair -----------------------------------------------------------------------------------------------

def _capacity(h: History, s: Sample, extra: tuple[str, ...] = ()) -> bool:
    """No node lost (all Ready, no node_loss/zone_loss active), nor any fault of `extra` active."""
    return s.all_nodes_ready() and not h.active(s.t, LOSS + extra)


def check_repair(h: History, b: Bounds) -> list[Breach]:
    out: list[Breach] = []
    cap_since: float | None = None
    short_since: dict[str, float] = {}
    want_since: dict[str, float] = {}
    last_want: dict[str, int] = {}
    reported: set[str] = set()
    for s in h.samples:
        cap_since = (cap_since if cap_since is not None else s.t) if _capacity(h, s) else None
        for c, want in s.want.items():
            if last_want.get(c) != want:
                want_since[c], last_want[c] = s.t, want
            if s.ready.get(c, 0) >= want:
                short_since.pop(c, None)
                reported.discard(c)
                continue
            short_since.setdefault(c, s.t)
            if cap_since is None or c in reported:
                continue
            clock, why = max((cap_since, "capacity returned"), (short_since[c], "it fell short"),
                             (want_since[c], "its want changed"))
            if s.t - clock > b.repair_s:
                reported.add(c)
                out.append(_breach(h, b, "repair", s.t, c,
                                   f"{s.ready.get(c, 0)} ready of {want} wanted, {s.t - clock:.1f} s after "
                                   f"{why} at t={clock:.1f} (bound {b.repair_s:g} s)"))
    return out


# 3. Pending ----------------------------------------------------------------------------------------------

def check_pending(h: History, b: Bounds) -> list[Breach]:
    cap_since: float | None = None
    book = Stretches(low_is_worse=False)
    done: list[Stretch] = []
    for s in h.samples:
        cap_since = (cap_since if cap_since is not None else s.t) if _capacity(h, s, ("priority_burst",)) else None
        for c in sorted(set(s.oldest) | set(book.open)):
            age = float(s.oldest.get(c) or 0) if s.pending.get(c, 1) else 0.0
            counted = min(age, s.t - cap_since) if cap_since is not None else 0.0
            closed = book.observe(c, s.t, counted > b.pending_s, age, f"{s.pending.get(c, '?')} Pending")
            if closed:
                done.append(closed)
    done += book.close((), h.end)
    return [_breach(h, b, "pending", st.start, st.key,
                    f"Pending more than {b.pending_s:g} s while capacity existed: oldest {st.worst:.1f} s "
                    f"({st.note}), until t={st.end:.1f}") for st in done]


# 4. Evictions answered 500, 5. drains ----------------------------------------------------------------------

def check_evictions(h: History, b: Bounds) -> list[Breach]:
    out: list[Breach] = []
    seen: set[Any] = set()
    for e in h.of("eviction"):
        if int(e.data.get("code", 0)) == 500:
            seen.add(e.data.get("fault_id"))
            out.append(_breach(h, b, "eviction-500", e.t, str(e.data.get("pod")),
                               "Eviction answered 500 (more than one budget over the pod)",
                               e.data.get("fault_id")))
    for f in h.faults:  # a drain's own count, where no eviction line says it
        n = int((f.end_detail.get("evictions") or {}).get("500", 0))
        if f.kind == "drain" and n and f.id not in seen and f.end is not None:
            out.append(_breach(h, b, "eviction-500", f.end, f.target,
                               f"the drain's Evictions answered 500 {n} times", f.id))
    return out


def component_of(pod: str, components: Iterable[str]) -> str | None:
    """The Deployment (ns/name) a pod "ns/name-<hash>-<suffix>" belongs to: the longest name that prefixes it."""
    ns, _, name = pod.partition("/")
    fits = [c for c in components if c.startswith(ns + "/") and name.startswith(c.partition("/")[2] + "-")]
    return max(fits, key=len) if fits else None


def _drained_components(h: History, f: Fault) -> set[str]:
    """What a drain evicted from (its eviction lines) or was blocked by (PDB names such as activator-pdb)."""
    found = {component_of(str(e.data.get("pod", "")), h.components)
             for e in h.of("eviction") if e.data.get("fault_id") == f.id}
    for blocker in f.end_detail.get("blocked_by") or []:
        ns, _, pdb = str(blocker).rpartition("/")  # "ns/name", or a name alone
        found |= {c for c in h.components if c.partition("/")[2] in (pdb, pdb.removesuffix("-pdb"))
                  and (not ns or c.startswith(ns + "/"))}
    return {c for c in found if c}


def check_drains(h: History, b: Bounds) -> list[Breach]:
    out: list[Breach] = []
    for f in h.faults:
        if f.kind != "drain" or f.end is None or f.end_detail.get("done", f.ok):
            continue
        if [g for g in h.overlapping(f.start, f.end, DRAIN_EXCUSES) if g.id != f.id]:
            continue
        at = h.sample_at(f.start)
        short = [c for c in _drained_components(h, f)
                 if at is not None and c in at.want and at.ready.get(c, 0) < at.want[c]]
        if short:
            continue
        codes = f.end_detail.get("evictions") or {}
        out.append(_breach(h, b, "drain", f.end, f.target,
                           f"drain #{f.id} not done after {f.end - f.start:.1f} s; blocked by "
                           f"{', '.join(f.end_detail.get('blocked_by') or []) or 'nothing named'}; evictions "
                           f"{', '.join(f'{k}: {v}' for k, v in sorted(codes.items())) or 'none'}", f.id))
    return out


# 6. Applies, 8. leader election --------------------------------------------------------------------------

def _api_server_away(h: History, t: float, b: Bounds) -> bool:
    """An apiserver_restart running at t, or ended less than Bounds.apiserver_back_s before it."""
    return any(f.start <= t <= f.until(h.end) + b.apiserver_back_s for f in h.faults if f.kind == "apiserver_restart")


def check_applies(h: History, b: Bounds) -> list[Breach]:
    out: list[Breach] = []
    for e in h.of("apply"):
        rc, refused = int(e.data.get("rc", 0)), e.data.get("expect_refused") is True
        what, stderr = str(e.data.get("what", "")), str(e.data.get("stderr", "")).strip()
        if rc != 0 and not refused:
            if e.data.get("transient") is True and _api_server_away(h, e.t, b):
                continue  # the API server restarting: the runner tries again, and that line counts
            out.append(_breach(h, b, "apply", e.t, what, f"apply exit {rc}: {stderr[:300]}",
                               e.data.get("fault_id")))
        elif refused and rc == 0 and not h.webhooks_down_near(e.t, e.t, b.fail_open_slack_s):
            out.append(_breach(h, b, "apply", e.t, what, "an invalid policy was admitted while a webhook replica "
                               "answered (expect_refused)", e.data.get("fault_id")))
    return out


def check_leader_election(h: History, b: Bounds) -> list[Breach]:
    return [_breach(h, b, "leader-election", e.t, f"{e.data.get('ns', '?')}/config-leader-election",
                    f"invalid: {e.data.get('why', '')}; data {json.dumps(e.data.get('data'), sort_keys=True)}")
            for e in h.of("leader_election_config") if e.data.get("valid") is not True]


# 7. Audit ------------------------------------------------------------------------------------------------

@dataclass
class Return:
    """The webhook back: webhooks_up 0 -> >= 1 at `t`, every replica up at `back` (`t` if never), and the
    next time it was 0 again (None if never)."""

    t: float
    back: float
    down: float | None = None


def webhook_returns(h: History) -> list[Return]:
    full = max((s.webhooks_up for s in h.samples), default=1) or 1
    out: list[Return] = []
    all_back = True
    prev: int | None = None
    for s in h.samples:
        if prev == 0 and s.webhooks_up >= 1:
            out.append(Return(s.t, s.t))
            all_back = False
        if out and out[-1].down is None:
            if not all_back and s.webhooks_up >= full:
                out[-1].back, all_back = s.t, True
            if s.webhooks_up == 0:
                out[-1].down, all_back = s.t, True
        prev = s.webhooks_up
    return out


def settled_at(h: History, returns: list[Return]) -> float:
    """When the last fault ended and the webhook was last all back: the end of the run is judged from there."""
    return max([f.until(h.end) for f in h.faults] + [r.back for r in returns] + [0.0])


def end_judged(h: History, b: Bounds) -> bool:
    """Whether the end of the run could be judged: an audit exit 0 came after it settled, or the bound passed."""
    settle, bound = settled_at(h, webhook_returns(h)), h.interval_s + b.audit_slack_s
    ok = any(settle < e.t <= settle + bound and int(e.data.get("rc", -1)) == 0 for e in h.of("audit"))
    return ok or h.end >= settle + bound


def check_audits(h: History, b: Bounds) -> list[Breach]:
    bound = h.interval_s + b.audit_slack_s
    audits = h.of("audit")
    ok = [e.t for e in audits if int(e.data.get("rc", -1)) == 0]
    out: list[Breach] = []
    returns = webhook_returns(h)
    for r in returns:
        deadline = r.back + bound
        seen = any(r.t < t <= deadline for t in ok)
        if seen or deadline > h.end or (r.down is not None and r.down < deadline):
            continue  # in line, not judged (the run ended), or the next outage came first
        out.append(_breach(h, b, "audit", deadline, "audit",
                           f"no audit exit 0 within {bound:g} s after the webhook's last replica was back at "
                           f"t={r.back:.1f} (up again from t={r.t:.1f})"))
    end = _end_of_run_audit(h, b, audits, ok, settled_at(h, returns))
    return out + [br for br in end if all(br.t != seen.t for seen in out)]  # the last return's, reported once


def _end_of_run_audit(h: History, b: Bounds, audits: list[Entry], ok: list[float], settle: float) -> list[Breach]:
    """After the last fault (and the webhook's last return): an audit exit 0 within the bound, and the run's
    last audit exit 0 when it came later than that. A run that ended sooner without one is not judged."""
    bound = h.interval_s + b.audit_slack_s
    if not any(settle < t <= settle + bound for t in ok):
        if h.end < settle + bound:
            return []
        return [_breach(h, b, "audit", settle + bound, "audit",
                        f"end of the run: no audit exit 0 within {bound:g} s after the last fault ended or the "
                        f"webhook was back (t={settle:.1f})")]
    last = audits[-1]
    if last.t > settle + bound and int(last.data.get("rc", -1)) != 0:
        return [_breach(h, b, "audit", last.t, "audit",
                        f"end of the run: the last audit exit {last.data.get('rc')} with no fault since "
                        f"t={settle:.1f}: {str(last.data.get('out', ''))[:300]}")]
    return []


# 9. Spec flips -------------------------------------------------------------------------------------------

def check_spec_flips(h: History, b: Bounds) -> list[Breach]:
    windows = [(f.start, f.until(h.end) + b.flip_after_s) for f in h.faults if f.kind in SPEC_CHANGERS]
    changes: dict[str, list[Entry]] = {}
    last_hash: dict[str, Any] = {}
    for e in h.of("spec"):
        obj = str(e.data.get("object"))
        if last_hash.get(obj, object()) == e.data.get("hash"):
            continue  # observed again, not changed
        last_hash[obj] = e.data.get("hash")
        if not any(lo <= e.t <= hi for lo, hi in windows):
            changes.setdefault(obj, []).append(e)
    out: list[Breach] = []
    for obj, seen in sorted(changes.items()):
        out += _flip_storms(h, b, obj, seen)
    return out


def _flip_storms(h: History, b: Bounds, obj: str, seen: list[Entry]) -> list[Breach]:
    out: list[Breach] = []
    first = 0
    storm: tuple[Breach, int] | None = None  # the breach of the storm under way and its peak count
    for i, e in enumerate(seen):
        while seen[first].t < e.t - b.flip_window_s:
            first += 1
        count = i - first + 1
        if count <= b.flip_changes:
            storm = None
        elif storm is None:
            breach = _breach(h, b, "spec-flips", e.t, obj, "")
            out.append(breach)
            storm = (breach, count)
        else:
            storm = (storm[0], max(storm[1], count))
        if storm is not None:
            gens = [x.data.get("generation") for x in seen[first:i + 1]]
            storm[0].message = (f"{storm[1]} spec changes within {b.flip_window_s:g} s (more than "
                                f"{b.flip_changes}), outside the spec-changing faults; generation "
                                f"{gens[0]} -> {gens[-1]}, last at t={e.t:.1f}")
    return out


# 10. Admission -------------------------------------------------------------------------------------------

def _increase(prev: Entry, cur: Entry, counter: str) -> float:
    """A cumulative counter's increase; a restarted API server (apiserver_epoch moved, or a drop) counts from 0."""
    before, now = float(prev.data.get(counter, 0)), float(cur.data.get(counter, 0))
    restarted = prev.data.get("apiserver_epoch") != cur.data.get("apiserver_epoch")
    return now if restarted or now < before else now - before


def check_admission(h: History, b: Bounds) -> list[Breach]:
    out: list[Breach] = []
    lines = h.of("admission")
    for prev, cur in zip(lines, lines[1:]):
        rejected, failed_open = _increase(prev, cur, "rejections"), _increase(prev, cur, "fail_open")
        if rejected > 0:
            out.append(_breach(h, b, "admission", cur.t, "mutate.knativeha.dev",
                               f"{rejected:g} admission(s) rejected between t={prev.t:.1f} and t={cur.t:.1f}"))
        if failed_open > 0 and not h.webhooks_down_near(prev.t, cur.t, b.fail_open_slack_s):
            out.append(_breach(h, b, "admission", cur.t, "mutate.knativeha.dev",
                               f"{failed_open:g} admission(s) failed open between t={prev.t:.1f} and "
                               f"t={cur.t:.1f} while webhooks_up was {cur.data.get('webhooks_up')} "
                               f"(never 0 within {b.fail_open_slack_s:g} s)"))
    return out


# 11. Memory ----------------------------------------------------------------------------------------------

def lifetimes(h: History) -> dict[str, list[list[tuple[float, int]]]]:
    """Per webhook replica, its process lifetimes as (t, rss_kib) lists: split where it is seen down
    (up false), its pid changes (when the line has one) or a webhook_kill/leader_kill names it."""
    kills = [(f.start, f.target) for f in h.faults if f.kind in ("webhook_kill", "leader_kill")]
    out: dict[str, list[list[tuple[float, int]]]] = {}
    last: dict[str, Entry] = {}
    for e in h.of("product"):
        replica = str(e.data.get("replica"))
        runs = out.setdefault(replica, [[]])
        before = last.get(replica, e)
        killed = any(before.t < t <= e.t and replica in target.split(",") for t, target in kills)
        new_pid = before.data.get("pid") != e.data.get("pid")
        if (not e.data.get("up") or killed or new_pid) and runs[-1]:
            runs.append([])
        if e.data.get("up"):
            runs[-1].append((e.t, int(e.data.get("rss_kib", 0))))
        last[replica] = e
    return {r: [run for run in runs if run] for r, runs in out.items()}


def memory_ratio(run: list[tuple[float, int]], b: Bounds) -> float | None:
    """Mean RSS of the last third over the first third (by time, after the warm-up); None if too short."""
    kept = [(t, rss) for t, rss in run if t >= run[0][0] + b.memory_warmup_s]
    if len(kept) < 6 or kept[-1][0] - kept[0][0] < b.memory_min_span_s:
        return None
    third = (kept[-1][0] - kept[0][0]) / 3
    first = [rss for t, rss in kept if t <= kept[0][0] + third]
    last = [rss for t, rss in kept if t >= kept[-1][0] - third]
    return (sum(last) / len(last)) / max(sum(first) / len(first), 1)


def check_memory(h: History, b: Bounds) -> list[Breach]:
    out: list[Breach] = []
    for replica, runs in sorted(lifetimes(h).items()):
        for run in runs:
            ratio = memory_ratio(run, b)
            if ratio is not None and ratio > b.memory_ratio:
                out.append(_breach(h, b, "memory", run[-1][0], replica,
                                   f"mean RSS of the lifetime's last third {ratio:.2f}x its first third "
                                   f"(bound {b.memory_ratio:g}x; t={run[0][0]:.1f} to {run[-1][0]:.1f}, "
                                   f"{run[0][1] / 1024:.1f} -> {run[-1][1] / 1024:.1f} MiB)"))
    return out


CHECKS = (check_ready_floor, check_repair, check_pending, check_evictions, check_drains, check_applies,
          check_audits, check_leader_election, check_spec_flips, check_admission, check_memory)


# Figures -------------------------------------------------------------------------------------------------

def component_figures(h: History) -> dict[str, dict[str, Any]]:
    """Per component: its want at the start, the fewest ready (and when), seconds below want in total and
    the longest stretch below it, the longest Pending."""
    out: dict[str, dict[str, Any]] = {}
    below: dict[str, float] = {}
    nxt = h.sample_times[1:] + h.sample_times[-1:]
    for s, t_next in zip(h.samples, nxt):
        for c, want in s.want.items():
            ready = s.ready.get(c, 0)
            f = out.setdefault(c, {"want": want, "fewest_ready": ready, "fewest_at": s.t, "below_want_s": 0.0,
                                   "longest_below_want_s": 0.0, "longest_pending_s": 0.0})
            if ready < f["fewest_ready"]:
                f["fewest_ready"], f["fewest_at"] = ready, s.t
            f["longest_pending_s"] = max(f["longest_pending_s"], float(s.oldest.get(c) or 0))
            if ready < want:
                below.setdefault(c, s.t)
                f["below_want_s"] += t_next - s.t
                f["longest_below_want_s"] = max(f["longest_below_want_s"], t_next - below[c])
            else:
                below.pop(c, None)
    return out


def repair_figures(h: History) -> dict[str, Any]:
    """The longest time from capacity returning (no node lost) to every component at its want."""
    longest: dict[str, Any] = {"seconds": 0.0, "capacity_back": None, "repaired": True}
    back: float | None = None
    had = True
    for s in h.samples:
        cap = _capacity(h, s)
        if cap and not had:
            back = s.t
        had = cap
        if not cap:
            back = None
        elif back is not None and all(s.ready.get(c, 0) >= w for c, w in s.want.items()):
            if s.t - back >= longest["seconds"]:
                longest = {"seconds": s.t - back, "capacity_back": back, "repaired": True}
            back = None
    if back is not None and h.end - back >= longest["seconds"]:
        longest = {"seconds": h.end - back, "capacity_back": back, "repaired": False}
    return longest


def fault_figures(h: History) -> dict[str, Any]:
    overlapped = sum(1 for f in h.faults
                     if any(g is not f and g.start <= f.until(h.end) and g.until(h.end) >= f.start
                            for g in h.faults))
    return {"injected": len(h.faults), "by_kind": dict(sorted(Counter(f.kind for f in h.faults).items())),
            "overlapped": overlapped, "unfinished": sum(1 for f in h.faults if f.end is None)}


def eviction_figures(h: History) -> dict[str, int]:
    codes: Counter[str] = Counter(str(e.data.get("code")) for e in h.of("eviction"))
    with_lines = {e.data.get("fault_id") for e in h.of("eviction")}
    for f in h.faults:  # a drain whose Evictions have no lines of their own: its own count
        if f.kind == "drain" and f.id not in with_lines:
            codes.update({str(k): int(v) for k, v in (f.end_detail.get("evictions") or {}).items()})
    return dict(sorted(codes.items()))


def admission_figures(h: History) -> dict[str, float]:
    lines = h.of("admission")
    out = {"requests": 0.0, "fail_open": 0.0, "rejections": 0.0}
    for prev, cur in zip(lines, lines[1:]):
        for k in out:
            out[k] += _increase(prev, cur, k)
    return out


def memory_figures(h: History, b: Bounds) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for replica, runs in sorted(lifetimes(h).items()):
        ratios = [r for r in (memory_ratio(run, b) for run in runs) if r is not None]
        out[replica] = {"lifetimes": len(runs), "judged": len(ratios),
                        "worst_ratio": round(max(ratios), 3) if ratios else None,
                        "max_rss_kib": max((rss for run in runs for _, rss in run), default=0)}
    return out


def figures(h: History, b: Bounds) -> dict[str, Any]:
    comps = component_figures(h)
    pend = max(comps.items(), key=lambda kv: kv[1]["longest_pending_s"], default=None)
    pend = pend if pend and pend[1]["longest_pending_s"] > 0 else None
    audits = h.of("audit")
    return {
        "components": comps,
        "longest_pending": {"component": pend[0], "seconds": pend[1]["longest_pending_s"]} if pend else None,
        "longest_repair": repair_figures(h),
        "faults": fault_figures(h),
        "evictions": eviction_figures(h),
        "admission": admission_figures(h),
        "audits": {"run": len(audits), "rc0": sum(1 for e in audits if int(e.data.get("rc", -1)) == 0),
                   "settled_at": settled_at(h, webhook_returns(h)),
                   "end_judged": end_judged(h, b)},
        "memory": memory_figures(h, b),
    }


# The report ----------------------------------------------------------------------------------------------

def duration_arg(seconds: float) -> str:
    """A duration as the runner's --duration takes it: 4h, 30m, 90s."""
    s = int(round(seconds))
    return f"{s // 3600}h" if s and s % 3600 == 0 else f"{s // 60}m" if s and s % 60 == 0 else f"{s}s"


@dataclass
class Report:
    path: Path
    run: dict[str, Any]
    faults: list[Fault]
    breaches: list[Breach]
    figures: dict[str, Any]
    end: float
    bounds: Bounds = Bounds()
    truncated: bool = False

    def replay(self) -> str:
        """The runner's command line that replays this run."""
        faults = self.run.get("faults") or []
        duration = duration_arg(float(self.run.get("duration_s") or self.end))
        line = f"scripts/measure/chaos --seed {self.run.get('seed')} --duration {duration}"
        line += f" --faults {','.join(faults)}" if faults else ""
        interval = self.run.get("interval_s")
        return line + (f" --interval {interval:g}" if isinstance(interval, (int, float)) else "")

    def text(self, max_excerpts: int = 20) -> str:
        """The report: the run, the faults' timeline, the figures, the breaches (the first `max_excerpts`
        with their history excerpt: a long soak's breaches can run to megabytes of sample lines)."""
        parts = [_run_text(self), _timeline_text(self), _figures_text(self.figures),
                 _breaches_text(self, max_excerpts)]
        return "\n\n".join(parts) + "\n"


def _run_text(r: Report) -> str:
    run = r.run
    lines = [f"chaos soak: seed {run.get('seed')}, duration {float(run.get('duration_s') or 0):g} s "
             f"(history to t={r.end:.1f}), faults: {', '.join(run.get('faults') or []) or 'none'}",
             f"binary {run.get('binary', '?')}, started {run.get('started', '?')}, reconcile interval "
             f"{run.get('interval_s', '?')} s, {len(run.get('components') or {})} components",
             f"history {r.path}" + (" (last line truncated, left out)" if r.truncated else ""),
             f"result: {len(r.breaches)} breach(es)" if r.breaches else "result: no breach"]
    return "\n".join(lines)


def _timeline_text(r: Report) -> str:
    rows = [f"faults ({len(r.faults)}):", f"{'t':>9}  {'id':>4}  {'fault':<17} {'target':<30} {'duration':>9}  ok"]
    for f in r.faults:
        dur = f"{f.end - f.start:.1f} s" if f.end is not None else "-"
        ok = "unfinished" if f.end is None else {True: "yes", False: "no"}.get(f.ok, str(f.ok))
        extra = f.end_detail.get("done")
        ok += f" (done {str(extra).lower()})" if f.kind == "drain" and extra is not None else ""
        rows.append(f"{f.start:>9.1f}  {f.id!s:>4}  {f.kind:<17} {f.target:<30} {dur:>9}  {ok}")
    return "\n".join(rows)


def _figures_text(fig: dict[str, Any]) -> str:
    rows = ["figures:",
            "  per component: want at start, fewest ready (at t), seconds below want, longest stretch, longest Pending"]
    for c, f in sorted(fig["components"].items()):
        rows.append(f"    {c:<48} want {f['want']:>2}  fewest {f['fewest_ready']:>2} (t={f['fewest_at']:.1f})  "
                    f"below {f['below_want_s']:.1f} s  longest {f['longest_below_want_s']:.1f} s  "
                    f"Pending {f['longest_pending_s']:.1f} s")
    pend, rep, fl = fig["longest_pending"], fig["longest_repair"], fig["faults"]
    rows.append(f"  longest Pending: {pend['seconds']:.1f} s ({pend['component']})" if pend
                else "  longest Pending: -")
    back = rep["capacity_back"]
    rows.append(f"  longest repair after capacity returned: {rep['seconds']:.1f} s" +
                (f" (capacity back at t={back:.1f}{'' if rep['repaired'] else ', not repaired by the end'})"
                 if back is not None else " (capacity never returned after a loss)"))
    kinds = ", ".join(f"{k} {n}" for k, n in fl["by_kind"].items()) or "none"
    rows.append(f"  faults: {fl['injected']} injected ({kinds}); {fl['overlapped']} overlapped another; "
                f"{fl['unfinished']} unfinished")
    rows.append("  evictions by code: " + (", ".join(f"{k}: {n}" for k, n in fig["evictions"].items()) or "none"))
    adm = fig["admission"]
    rows.append(f"  admission: {adm['requests']:g} requests, {adm['fail_open']:g} fail-open, "
                f"{adm['rejections']:g} rejections")
    aud = fig["audits"]
    end = "judged" if aud["end_judged"] else "NOT judged (no audit exit 0 since, and the run ended within the bound)"
    rows.append(f"  audits: {aud['run']} run, {aud['rc0']} exit 0; the end of the run {end}: settled at "
                f"t={aud['settled_at']:.1f} (the last fault's end or the webhook's return)")
    for replica, m in fig["memory"].items():
        ratio = f"{m['worst_ratio']:.2f}x" if m["worst_ratio"] is not None else "-"
        rows.append(f"  memory {replica}: {m['lifetimes']} lifetime(s), {m['judged']} judged, worst last/first third "
                    f"{ratio}, max {m['max_rss_kib'] / 1024:.1f} MiB")
    return "\n".join(rows)


def _breaches_text(r: Report, max_excerpts: int) -> str:
    if not r.breaches:
        return "breaches: none"
    rows = [f"breaches ({len(r.breaches)}):"]
    for i, br in enumerate(r.breaches, 1):
        rows.append(f"[{i}] {br.headline()}")
        rows.append(f"    invariant {INVARIANTS[br.invariant]}")
        rows.append(f"    seed {r.run.get('seed')}" + (f", fault #{br.fault_id}" if br.fault_id is not None else "")
                    + "; faults then: " + ("; ".join(br.faults) or "none"))
        rows.append(f"    replay: {r.replay()}")
        around = r.bounds.excerpt_s
        span = f"history t={br.t - around:.1f}..{br.t + around:.1f} ({len(br.excerpt)} lines)"
        if i > max_excerpts:
            rows.append(f"    {span}: left out (only the first {max_excerpts} breaches print theirs)")
            continue
        rows.append(f"    {span}:")
        rows.extend(f"      {line}" for line in br.excerpt)
    return "\n".join(rows)


def check(history_path: str | Path, *, bounds: Bounds = Bounds()) -> Report:
    """Read the history, check every invariant, and make the report."""
    h = History(Path(history_path))
    breaches = [br for chk in CHECKS for br in chk(h, bounds)]
    breaches.sort(key=lambda br: (br.t, list(INVARIANTS).index(br.invariant), br.subject))
    return Report(h.path, h.run, h.faults, breaches, figures(h, bounds), h.end, bounds, h.truncated)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print("usage: chaos_check.py HISTORY.jsonl  (prints the report; exit 1 on a breach, 2 on a bad history)",
              file=sys.stderr)
        return 2
    try:
        report = check(args[0])
    except (OSError, HistoryError) as err:
        print(f"chaos_check: {err}", file=sys.stderr)
        return 2
    print(report.text(), end="")
    return 1 if report.breaches else 0


if __name__ == "__main__":
    sys.exit(main())
