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

The parts: chaos_history.py reads the history (and holds Bounds and Breach), chaos_invariants_capacity.py
checks invariants 1-5, chaos_invariants_product.py 6-11, chaos_report.py makes the figures and the text;
this module joins them (check, main) and keeps serving their public names.
"""

from __future__ import annotations

import sys
from pathlib import Path

from chaos_history import INVARIANTS, Bounds, Breach, Entry, Fault, History, HistoryError, Sample
from chaos_invariants_capacity import (
    DRAIN_EXCUSES, LOSS, Stretch, Stretches, check_drains, check_evictions, check_pending, check_ready_floor,
    check_repair, component_of)
from chaos_invariants_product import (
    SPEC_CHANGERS, Return, check_admission, check_applies, check_audits, check_leader_election, check_memory,
    check_spec_flips, end_judged, lifetimes, memory_ratio, settled_at, webhook_returns)
from chaos_report import (
    Report, admission_figures, component_figures, duration_arg, eviction_figures, fault_figures, figures,
    memory_figures, repair_figures)

__all__ = [  # the public names: chaos_check serves those of its parts too
    "admission_figures", "Bounds", "Breach", "check", "check_admission", "check_applies", "check_audits",
    "check_drains", "check_evictions", "check_leader_election", "check_memory", "check_pending",
    "check_ready_floor", "check_repair", "check_spec_flips", "CHECKS", "component_figures", "component_of",
    "DRAIN_EXCUSES", "duration_arg", "end_judged", "Entry", "eviction_figures", "Fault", "fault_figures", "figures",
    "History", "HistoryError", "INVARIANTS", "lifetimes", "LOSS", "main", "memory_figures", "memory_ratio",
    "repair_figures", "Report", "Return", "Sample", "settled_at", "SPEC_CHANGERS", "Stretch", "Stretches",
    "webhook_returns",
]

CHECKS = (check_ready_floor, check_repair, check_pending, check_evictions, check_drains, check_applies,
          check_audits, check_leader_election, check_spec_flips, check_admission, check_memory)


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
