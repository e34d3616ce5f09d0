"""Invariants 6 to 11 of the chaos soak's checker (chaos_check.py): the product's own conduct. Every apply
succeeds (an invalid policy is refused), audit is in line after the webhook returns and at the end,
config-leader-election stays valid, no spec flips, no admission is rejected or fails open while a replica
answers, and each webhook process's memory stays flat.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from chaos_history import Bounds, Breach, Entry, History, make_breach

# Faults that change specs on purpose: spec changes in their window (+ Bounds.flip_after_s) are not counted.
SPEC_CHANGERS = ("policy_edit", "policy_recreate", "upgrade", "downgrade", "hpa_min")


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
            out.append(make_breach(h, b, "apply", e.t, what, f"apply exit {rc}: {stderr[:300]}",
                                   e.data.get("fault_id")))
        elif refused and rc == 0 and not h.webhooks_down_near(e.t, e.t, b.fail_open_slack_s):
            out.append(make_breach(h, b, "apply", e.t, what, "an invalid policy was admitted while a webhook replica "
                                   "answered (expect_refused)", e.data.get("fault_id")))
    return out


def check_leader_election(h: History, b: Bounds) -> list[Breach]:
    return [make_breach(h, b, "leader-election", e.t, f"{e.data.get('ns', '?')}/config-leader-election",
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
        out.append(make_breach(h, b, "audit", deadline, "audit",
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
        return [make_breach(h, b, "audit", settle + bound, "audit",
                            f"end of the run: no audit exit 0 within {bound:g} s after the last fault ended or the "
                            f"webhook was back (t={settle:.1f})")]
    last = audits[-1]
    if last.t > settle + bound and int(last.data.get("rc", -1)) != 0:
        return [make_breach(h, b, "audit", last.t, "audit",
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
            breach = make_breach(h, b, "spec-flips", e.t, obj, "")
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

def increase(prev: Entry, cur: Entry, counter: str) -> float:
    """A cumulative counter's increase; a restarted API server (apiserver_epoch moved, or a drop) counts from 0."""
    before, now = float(prev.data.get(counter, 0)), float(cur.data.get(counter, 0))
    restarted = prev.data.get("apiserver_epoch") != cur.data.get("apiserver_epoch")
    return now if restarted or now < before else now - before


def check_admission(h: History, b: Bounds) -> list[Breach]:
    out: list[Breach] = []
    lines = h.of("admission")
    for prev, cur in zip(lines, lines[1:]):
        rejected, failed_open = increase(prev, cur, "rejections"), increase(prev, cur, "fail_open")
        if rejected > 0:
            out.append(make_breach(h, b, "admission", cur.t, "mutate.knativeha.dev",
                                   f"{rejected:g} admission(s) rejected between t={prev.t:.1f} and t={cur.t:.1f}"))
        if failed_open > 0 and not h.webhooks_down_near(prev.t, cur.t, b.fail_open_slack_s):
            out.append(make_breach(h, b, "admission", cur.t, "mutate.knativeha.dev",
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
                out.append(make_breach(h, b, "memory", run[-1][0], replica,
                                       f"mean RSS of the lifetime's last third {ratio:.2f}x its first third "
                                       f"(bound {b.memory_ratio:g}x; t={run[0][0]:.1f} to {run[-1][0]:.1f}, "
                                       f"{run[0][1] / 1024:.1f} -> {run[-1][1] / 1024:.1f} MiB)"))
    return out
