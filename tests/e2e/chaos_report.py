"""The chaos soak checker's report (chaos_check.py): the figures of a history (per component, repairs,
faults, evictions, admission, audits, memory) and the text made of them and the breaches.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos_history import INVARIANTS, Bounds, Breach, Fault, History
from chaos_invariants_capacity import has_capacity
from chaos_invariants_product import end_judged, increase, lifetimes, memory_ratio, settled_at, webhook_returns


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
        cap = has_capacity(h, s)
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
            out[k] += increase(prev, cur, k)
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

