"""Invariants 1 to 5 of the chaos soak's checker (chaos_check.py): capacity and disruption. Every component
keeps its ready floor, is repaired within the bound once capacity returns, no pod stays Pending while
capacity exists, no Eviction is answered 500, and a drain the budgets allow finishes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from chaos_history import Bounds, Breach, Fault, History, Sample, make_breach

LOSS = ("node_loss", "zone_loss")
# Faults that excuse a drain that did not finish when they overlap it.
DRAIN_EXCUSES = ("node_loss", "zone_loss", "priority_burst", "eviction_storm")


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
    """Open stretches per key, and those closed (`done`, in the order they closed)."""

    def __init__(self, low_is_worse: bool) -> None:
        self.open: dict[str, Stretch] = {}
        self.done: list[Stretch] = []
        self.low_is_worse = low_is_worse

    def observe(self, key: str, t: float, bad: bool, value: float, note: str) -> None:
        """A sample's state for `key`: a bad one opens or extends its stretch, a good one closes it."""
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
            self.done.append(cur)

    def close(self, keep: Iterable[str], t: float) -> None:
        """Close every open stretch whose key is not in `keep` (all of them with keep empty) at t."""
        kept = set(keep)
        done = [s for k, s in self.open.items() if k not in kept]
        for s in done:
            del self.open[s.key]
            s.end = max(s.end, t)
        self.done += done

    def finish(self, t: float) -> list[Stretch]:
        """Every stretch, those still open closed at t (the end of the history)."""
        self.close((), t)
        return self.done


# 1. Ready floor -------------------------------------------------------------------------------------------

def check_ready_floor(h: History, b: Bounds) -> list[Breach]:
    hold_from: dict[str, float] = {}
    last_want: dict[str, int] = {}
    book = Stretches(low_is_worse=True)
    for s in h.samples:
        book.close(s.want, s.t)  # a component gone from the sample (a downgrade removed it)
        for c, want in s.want.items():
            ready, lost = s.ready.get(c, 0), s.on_lost.get(c, 0)
            _hold_floor_from(hold_from, last_want, c, want, ready, s.t, b)
            floor = max(0, min(want, b.floor) - lost)
            bad = s.t >= hold_from[c] and ready < floor
            book.observe(c, s.t, bad, ready, f"floor {floor}: want {want}, {lost} on lost nodes")
    return [make_breach(h, b, "ready-floor", st.start, st.key,
                        f"{int(st.worst)} ready, below the {st.note}; {st.seconds:.1f} s below "
                        f"(t={st.start:.1f} to {st.end:.1f})") for st in book.finish(h.end)]


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

def has_capacity(h: History, s: Sample, extra: tuple[str, ...] = ()) -> bool:
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
        cap_since = (cap_since if cap_since is not None else s.t) if has_capacity(h, s) else None
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
                out.append(make_breach(h, b, "repair", s.t, c,
                                       f"{s.ready.get(c, 0)} ready of {want} wanted, {s.t - clock:.1f} s after "
                                       f"{why} at t={clock:.1f} (bound {b.repair_s:g} s)"))
    return out


# 3. Pending ----------------------------------------------------------------------------------------------

def check_pending(h: History, b: Bounds) -> list[Breach]:
    cap_since: float | None = None
    book = Stretches(low_is_worse=False)
    for s in h.samples:
        cap_since = (cap_since if cap_since is not None else s.t) if has_capacity(h, s, ("priority_burst",)) else None
        for c in sorted(set(s.oldest) | set(book.open)):
            age = float(s.oldest.get(c) or 0) if s.pending.get(c, 1) else 0.0
            counted = min(age, s.t - cap_since) if cap_since is not None else 0.0
            book.observe(c, s.t, counted > b.pending_s, age, f"{s.pending.get(c, '?')} Pending")
    return [make_breach(h, b, "pending", st.start, st.key,
                        f"Pending more than {b.pending_s:g} s while capacity existed: oldest {st.worst:.1f} s "
                        f"({st.note}), until t={st.end:.1f}") for st in book.finish(h.end)]


# 4. Evictions answered 500, 5. drains ----------------------------------------------------------------------

def check_evictions(h: History, b: Bounds) -> list[Breach]:
    out: list[Breach] = []
    seen: set[Any] = set()
    for e in h.of("eviction"):
        if int(e.data.get("code", 0)) == 500:
            seen.add(e.data.get("fault_id"))
            out.append(make_breach(h, b, "eviction-500", e.t, str(e.data.get("pod")),
                                   "Eviction answered 500 (more than one budget over the pod)",
                                   e.data.get("fault_id")))
    for f in h.faults:  # a drain's own count, where no eviction line says it
        n = int((f.end_detail.get("evictions") or {}).get("500", 0))
        if f.kind == "drain" and n and f.id not in seen and f.end is not None:
            out.append(make_breach(h, b, "eviction-500", f.end, f.target,
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
        out.append(make_breach(h, b, "drain", f.end, f.target,
                               f"drain #{f.id} not done after {f.end - f.start:.1f} s; blocked by "
                               f"{', '.join(f.end_detail.get('blocked_by') or []) or 'nothing named'}; evictions "
                               f"{', '.join(f'{k}: {v}' for k, v in sorted(codes.items())) or 'none'}", f.id))
    return out

