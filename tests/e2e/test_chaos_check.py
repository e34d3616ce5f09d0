"""The chaos soak's checker (chaos_check.py) on small synthetic histories: each invariant fires when broken
and stays quiet where its exception applies. Standard library only, no cluster:

    cd tests/e2e && python3 -m unittest -v test_chaos_check
"""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
import unittest
from pathlib import Path
from typing import Any, Callable

import chaos_check
from chaos_check import Bounds, HistoryError, check

ACTIVATOR = "knative-serving/activator"
CONTROLLER = "knative-serving/controller"
PINGSOURCE = "knative-eventing/pingsource-mt-adapter"
COMPONENTS = {ACTIVATOR: 3, CONTROLLER: 2, PINGSOURCE: 0}
SAMPLE_FIELDS = ("ready", "want", "pending", "pending_oldest_s", "on_lost")


class Hist:
    """A synthetic history: a quiet cluster (every component at its want, 6 of 6 nodes, 2 webhooks up,
    audits exit 0, flat memory) over `duration` seconds, with what a test changes on top."""

    def __init__(self, duration: float = 600.0, interval_s: float = 60.0, product: bool = True,
                 admission: bool = True) -> None:
        self.duration = duration
        self.interval_s = interval_s
        self.product = product
        self.admission = admission
        self.lines: list[dict[str, Any]] = []
        self.overrides: list[tuple[float, float, dict[str, Any]]] = []
        self.audit_rc: list[tuple[float, float, int]] = []
        self.bumps: list[tuple[float, str, float]] = []
        self.faults_seen: list[str] = []
        self.next_id = 1

    def during(self, t0: float, t1: float, **fields: Any) -> Hist:
        """Samples in [t0, t1) take these fields (dicts merged per component; a callable is called with t)."""
        self.overrides.append((t0, t1, fields))
        return self

    def add(self, t: float, kind: str, **fields: Any) -> Hist:
        self.lines.append({"t": t, "type": kind, **fields})
        return self

    def fault(self, kind: str, t0: float, t1: float | None, target: str = "x", ok: bool = True,
              detail: dict[str, Any] | None = None, end_detail: dict[str, Any] | None = None) -> int:
        fid, self.next_id = self.next_id, self.next_id + 1
        self.faults_seen.append(kind)
        self.add(t0, "fault_start", id=fid, fault=kind, target=target, detail=detail or {})
        if t1 is not None:
            self.add(t1, "fault_end", id=fid, fault=kind, ok=ok, detail=end_detail or {})
        return fid

    def audits(self, t0: float, t1: float, rc: int) -> Hist:
        """The audits in [t0, t1) exit rc (a later call wins where they overlap)."""
        self.audit_rc.append((t0, t1, rc))
        return self

    def bump(self, t: float, counter: str, by: float = 1.0) -> Hist:
        """The admission counter `counter` (rejections, fail_open) goes up by `by` at t."""
        self.bumps.append((t, counter, by))
        return self

    def sample(self, t: float) -> dict[str, Any]:
        s: dict[str, Any] = {"t": t, "type": "sample", "ready": dict(COMPONENTS), "want": dict(COMPONENTS),
                             "pending": {}, "pending_oldest_s": {}, "on_lost": {}, "nodes_ready": 6,
                             "nodes_total": 6, "webhooks_up": 2}
        for t0, t1, fields in self.overrides:
            if t0 <= t < t1:
                for k, v in fields.items():
                    v = v(t) if callable(v) else v
                    if k in SAMPLE_FIELDS:
                        s[k].update(v)
                    else:
                        s[k] = v
        return s

    def background(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        steps = int(self.duration * 2) + 1
        for i in range(steps):
            t = i * 0.5
            sample = self.sample(t)
            out.append(sample)
            if self.admission and i % 4 == 0:
                counts = {k: sum(by for bt, c, by in self.bumps if c == k and bt <= t)
                          for k in ("rejections", "fail_open")}
                out.append({"t": t, "type": "admission", "requests": 10.0 * i, **counts,
                            "webhooks_up": sample["webhooks_up"]})
            if i % 20 == 5:
                rc = next((rc for a, b, rc in reversed(self.audit_rc) if a <= t < b), 0)  # the last set wins
                out.append({"t": t, "type": "audit", "rc": rc, "out": "", "webhooks_up": sample["webhooks_up"]})
            if self.product and i % 10 == 0:
                out += [{"t": t, "type": "product", "replica": r, "rss_kib": 30000, "up": True}
                        for r in ("webhook-a", "webhook-b")]
        return out

    def write(self, directory: str) -> Path:
        run = {"t": 0.0, "type": "run", "seed": 7, "duration_s": self.duration,
               "faults": sorted(set(self.faults_seen)), "binary": "knative-ha-webhook", "started":
               "2026-12-08T00:00:00Z", "components": dict(COMPONENTS), "interval_s": self.interval_s}
        rest = sorted(self.background() + self.lines, key=lambda line: line["t"])
        path = Path(directory) / "history.jsonl"
        path.write_text("".join(json.dumps(line) + "\n" for line in [run] + rest))
        return path


class Case(unittest.TestCase):
    def setUp(self) -> None:
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def run_check(self, h: Hist, bounds: Bounds = Bounds()) -> chaos_check.Report:
        return check(h.write(self.tmp.name), bounds=bounds)

    def breaches(self, h: Hist, invariant: str) -> list[chaos_check.Breach]:
        return [b for b in self.run_check(h).breaches if b.invariant == invariant]

    def assert_quiet(self, h: Hist) -> None:
        report = self.run_check(h)
        self.assertEqual([b.headline() for b in report.breaches], [])


class Clean(Case):
    def test_a_clean_history_has_no_breach(self) -> None:
        h = Hist()
        fid = h.fault("drain", 100.0, 104.0, target="node-a1",
                      end_detail={"done": True, "blocked_by": [], "evictions": {"201": 2, "429": 1}})
        h.add(101.0, "eviction", pod=f"{ACTIVATOR}-5d8f7c9b4-x2k9q", code=429, fault_id=fid)
        h.add(101.5, "eviction", pod=f"{ACTIVATOR}-5d8f7c9b4-x2k9q", code=201, fault_id=fid)
        h.add(102.0, "eviction", pod=f"{CONTROLLER}-7c6b9d8f5-p4m2z", code=201, fault_id=fid)
        h.during(101.5, 103.0, ready={ACTIVATOR: 2})
        h.add(1.0, "leader_election_config", ns="knative-serving", data={"lease-duration": "15s"}, valid=True,
              why="")
        h.add(2.0, "spec", object=f"deployment/{ACTIVATOR}", hash="a", generation=1)
        h.add(3.0, "apply", what="knative-serving v1.23.0", rc=0, stderr="", fault_id=None)
        report = self.run_check(h)
        self.assertEqual([b.headline() for b in report.breaches], [])
        text = report.text()
        self.assertTrue(text.startswith("chaos soak: seed 7, duration 600 s"), text[:200])
        self.assertIn("result: no breach", text)
        self.assertIn("node-a1", text)
        fig = report.figures
        self.assertEqual(fig["evictions"], {"201": 2, "429": 1})
        self.assertEqual(fig["faults"]["by_kind"], {"drain": 1})
        self.assertEqual(fig["components"][ACTIVATOR]["fewest_ready"], 2)
        self.assertAlmostEqual(fig["components"][ACTIVATOR]["below_want_s"], 1.5)
        self.assertEqual(fig["audits"], {"run": 60, "rc0": 60, "settled_at": 104.0, "end_judged": True})
        self.assertEqual(fig["memory"]["webhook-a"]["judged"], 1)


class ReadyFloor(Case):
    def test_fewer_than_two_ready_fires(self) -> None:
        found = self.breaches(Hist().during(200.0, 203.0, ready={ACTIVATOR: 1}), "ready-floor")
        self.assertEqual([(b.subject, b.t) for b in found], [(ACTIVATOR, 200.0)])
        self.assertIn("1 ready", found[0].message)
        self.assertTrue(found[0].excerpt)
        times = [json.loads(line)["t"] for line in found[0].excerpt]
        self.assertGreaterEqual(min(times), 190.0)
        self.assertLessEqual(max(times), 210.0)

    def test_one_allowed_with_one_pod_on_a_lost_zone(self) -> None:
        h = Hist()
        h.fault("zone_loss", 200.0, 240.0, target="zone-b", detail={"nodes": ["b1", "b2"]})
        h.during(200.0, 240.0, nodes_ready=4, ready={ACTIVATOR: 1, CONTROLLER: 1},
                 on_lost={ACTIVATOR: 1, CONTROLLER: 1})
        h.during(240.0, 245.0, ready={ACTIVATOR: 2})
        self.assert_quiet(h)

    def test_none_ready_fires_even_with_one_on_a_lost_node(self) -> None:
        h = Hist()
        h.fault("node_loss", 200.0, 240.0, target="a1", detail={"nodes": ["a1"]})
        h.during(200.0, 240.0, nodes_ready=5, on_lost={ACTIVATOR: 1})
        h.during(210.0, 212.0, ready={ACTIVATOR: 0})
        found = self.breaches(h, "ready-floor")
        self.assertEqual([b.t for b in found], [210.0])
        self.assertIn("#1 node_loss a1", found[0].faults[0])

    def test_a_rollout_gets_no_excuse(self) -> None:
        h = Hist()
        h.fault("upgrade", 200.0, 230.0, target="knative-serving", detail={"from": "1.20", "to": "1.23",
                                                                           "how": "server-side"})
        h.during(201.0, 201.5, ready={CONTROLLER: 1})
        found = self.breaches(h, "ready-floor")
        self.assertEqual([(b.subject, b.t) for b in found], [(CONTROLLER, 201.0)])
        self.assertIn("upgrade", found[0].faults[0])

    def test_a_component_scaled_on_demand_gets_the_grace_after_its_want_changes(self) -> None:
        h = Hist().during(200.0, 600.0, want={PINGSOURCE: 1}).during(200.0, 230.0, ready={PINGSOURCE: 0})
        h.during(230.0, 600.0, ready={PINGSOURCE: 1})
        self.assert_quiet(h)
        h.during(400.0, 401.0, ready={PINGSOURCE: 0})
        found = self.breaches(h, "ready-floor")
        self.assertEqual([(b.subject, b.t) for b in found], [(PINGSOURCE, 400.0)])


class Repair(Case):
    def zone_loss(self, short_until: float) -> Hist:
        h = Hist()
        h.fault("zone_loss", 200.0, 260.0, target="zone-c", detail={"nodes": ["c1", "c2"]})
        h.during(200.0, 260.0, nodes_ready=4, on_lost={ACTIVATOR: 1})
        return h.during(200.0, short_until, ready={ACTIVATOR: 2})

    def test_not_back_to_want_after_capacity_returns_fires(self) -> None:
        found = self.breaches(self.zone_loss(short_until=400.0), "repair")
        self.assertEqual(len(found), 1)
        self.assertEqual(found[0].subject, ACTIVATOR)
        self.assertAlmostEqual(found[0].t, 350.5)
        self.assertIn("capacity returned at t=260.0", found[0].message)

    def test_back_within_the_bound_is_quiet(self) -> None:
        report = self.run_check(self.zone_loss(short_until=320.0))
        self.assertEqual([b.headline() for b in report.breaches], [])
        self.assertAlmostEqual(report.figures["longest_repair"]["seconds"], 60.0)

    def test_no_clock_while_a_node_is_lost(self) -> None:
        h = Hist()
        h.fault("node_loss", 100.0, 400.0, target="a1", detail={"nodes": ["a1"]})
        h.during(100.0, 400.0, nodes_ready=5, ready={ACTIVATOR: 2}, on_lost={ACTIVATOR: 1})
        self.assertEqual(self.breaches(h, "repair"), [])


class Pending(Case):
    @staticmethod
    def growing(t0: float) -> Callable[[float], dict[str, float]]:
        return lambda t: {ACTIVATOR: t - t0}

    def test_pending_past_the_bound_with_capacity_fires(self) -> None:
        h = Hist().during(200.0, 300.0, pending={ACTIVATOR: 1}, pending_oldest_s=self.growing(200.0))
        found = self.breaches(h, "pending")
        self.assertEqual([(b.subject, b.t) for b in found], [(ACTIVATOR, 260.5)])

    def test_pending_during_a_priority_burst_is_quiet(self) -> None:
        h = Hist()
        h.fault("priority_burst", 190.0, 300.0, target="zone-a")
        h.during(200.0, 300.0, pending={ACTIVATOR: 1}, pending_oldest_s=self.growing(200.0))
        self.assertEqual(self.breaches(h, "pending"), [])

    def test_pending_counts_from_capacity_returning(self) -> None:
        h = Hist()
        h.fault("zone_loss", 100.0, 200.0, target="zone-a", detail={"nodes": ["a1", "a2"]})
        h.during(100.0, 200.0, nodes_ready=4, on_lost={ACTIVATOR: 1})
        h.during(150.0, 230.0, pending={ACTIVATOR: 1}, pending_oldest_s=self.growing(150.0))
        self.assertEqual(self.breaches(h, "pending"), [])


class Evictions(Case):
    def test_an_eviction_answered_500_fires_and_429_does_not(self) -> None:
        h = Hist()
        fid = h.fault("drain", 100.0, 104.0, target="node-b1",
                      end_detail={"done": True, "blocked_by": [], "evictions": {"201": 1, "429": 1, "500": 1}})
        h.add(101.0, "eviction", pod=f"{ACTIVATOR}-abc-1", code=429, fault_id=fid)
        h.add(102.0, "eviction", pod=f"{ACTIVATOR}-abc-2", code=500, fault_id=fid)
        h.add(103.0, "eviction", pod=f"{ACTIVATOR}-abc-2", code=201, fault_id=fid)
        report = self.run_check(h)
        self.assertEqual([(b.invariant, b.t, b.fault_id) for b in report.breaches], [("eviction-500", 102.0, fid)])
        self.assertEqual(report.figures["evictions"], {"201": 1, "429": 1, "500": 1})

    def test_a_drains_own_count_of_500_fires_without_eviction_lines(self) -> None:
        h = Hist()
        h.fault("drain", 100.0, 104.0, target="node-b1", end_detail={"done": True, "evictions": {"500": 2}})
        found = self.breaches(h, "eviction-500")
        self.assertEqual([(b.t, b.subject) for b in found], [(104.0, "node-b1")])


class Drains(Case):
    def blocked(self, h: Hist, t0: float = 200.0) -> int:
        fid = h.fault("drain", t0, t0 + 60.0, target="node-a1", ok=False,
                      end_detail={"done": False, "blocked_by": ["activator-pdb"], "evictions": {"429": 12}})
        h.add(t0 + 1.0, "eviction", pod=f"{ACTIVATOR}-5d8f7c9b4-q1", code=429, fault_id=fid)
        return fid

    def test_a_drain_not_done_fires(self) -> None:
        h = Hist()
        fid = self.blocked(h)
        found = self.breaches(h, "drain")
        self.assertEqual([(b.t, b.fault_id, b.subject) for b in found], [(260.0, fid, "node-a1")])
        self.assertIn("activator-pdb", found[0].message)

    def test_a_drain_blocked_during_a_zone_loss_is_quiet(self) -> None:
        h = Hist()
        self.blocked(h)
        h.fault("zone_loss", 230.0, 290.0, target="zone-b", detail={"nodes": ["b1", "b2"]})
        h.during(230.0, 290.0, nodes_ready=4, on_lost={ACTIVATOR: 1}, ready={ACTIVATOR: 2})
        self.assertEqual(self.breaches(h, "drain"), [])

    def test_a_drain_of_a_component_short_at_its_start_is_quiet(self) -> None:
        h = Hist()
        self.blocked(h)
        h.during(190.0, 230.0, ready={ACTIVATOR: 2})
        self.assertEqual(self.breaches(h, "drain"), [])

    def test_a_drain_blocked_by_the_budget_of_a_component_short_at_its_start_is_quiet(self) -> None:
        h = Hist()
        h.fault("drain", 200.0, 260.0, target="node-a1", ok=False,
                end_detail={"done": False, "blocked_by": ["knative-serving/controller-pdb"], "evictions": {"429": 12}})
        h.during(190.0, 230.0, ready={CONTROLLER: 1}, on_lost={CONTROLLER: 1})  # floor 1: not a floor breach
        self.assertEqual(self.breaches(h, "drain"), [])
        h.during(190.0, 230.0, ready={CONTROLLER: 2})  # the controller at its want: the drain should finish
        h.during(190.0, 230.0, ready={ACTIVATOR: 2})  # another component short: no excuse
        self.assertEqual([b.t for b in self.breaches(h, "drain")], [260.0])


class Applies(Case):
    def test_a_failed_apply_fires(self) -> None:
        h = Hist().add(100.0, "apply", what="knative-serving v1.23.0", rc=1, stderr="conflict", fault_id=None)
        found = self.breaches(h, "apply")
        self.assertEqual(len(found), 1)
        self.assertIn("conflict", found[0].message)

    def test_an_invalid_policy_refused_is_quiet_and_admitted_fires(self) -> None:
        h = Hist()
        fid = h.fault("policy_invalid", 100.0, 101.0)
        h.add(100.5, "apply", what="policy (invalid)", rc=1, stderr="denied", fault_id=fid, expect_refused=True)
        self.assert_quiet(h)
        h.add(150.0, "apply", what="policy (invalid)", rc=0, stderr="", fault_id=fid, expect_refused=True)
        self.assertEqual([b.t for b in self.breaches(h, "apply")], [150.0])

    def test_an_invalid_policy_admitted_while_no_webhook_answers_is_quiet(self) -> None:
        h = Hist().during(140.0, 160.0, webhooks_up=0)
        h.add(150.0, "apply", what="policy (invalid)", rc=0, stderr="", fault_id=None, expect_refused=True)
        self.assertEqual(self.breaches(h, "apply"), [])

    def test_a_transient_failure_while_the_api_server_restarts_is_quiet(self) -> None:
        h = Hist()
        h.fault("apiserver_restart", 100.0, 120.0, target="kube-apiserver")
        h.add(110.0, "apply", what="policy serving back", rc=1, stderr="connection refused", fault_id=1,
              transient=True)
        h.add(125.0, "apply", what="policy serving back", rc=1, stderr="connection refused", fault_id=1,
              transient=True)
        self.assertEqual(self.breaches(h, "apply"), [])
        h.add(200.0, "apply", what="knative-serving 1.20->1.23", rc=1, stderr="connection refused", fault_id=None,
              transient=True)
        self.assertEqual([b.t for b in self.breaches(h, "apply")], [200.0])


class Audits(Case):
    def outage(self) -> Hist:
        h = Hist()
        h.fault("webhook_kill", 200.0, 230.0, target="webhook-a,webhook-b")
        return h.during(200.0, 230.0, webhooks_up=0).during(230.0, 235.0, webhooks_up=1)

    def test_no_audit_in_line_after_the_webhook_returns_fires(self) -> None:
        found = self.breaches(self.outage().audits(150.0, 400.0, rc=1), "audit")
        self.assertEqual(len(found), 1)
        self.assertAlmostEqual(found[0].t, 325.0)  # all back at 235 + interval 60 + 30
        self.assertIn("t=235.0", found[0].message)

    def test_an_audit_in_line_within_the_bound_is_quiet(self) -> None:
        self.assertEqual(self.breaches(self.outage().audits(150.0, 300.0, rc=1), "audit"), [])

    def test_the_end_of_the_run_fires_when_the_last_audit_is_not_in_line(self) -> None:
        found = self.breaches(Hist().audits(500.0, 600.0, rc=1), "audit")
        self.assertEqual(len(found), 1)
        self.assertIn("end of the run", found[0].message)

    def test_a_run_that_ends_before_the_bound_is_not_judged_at_its_end(self) -> None:
        h = Hist()
        h.fault("policy_edit", 500.0, 550.0, target="serving")
        h.audits(540.0, 600.0, rc=1)  # 50 s after the last fault: within interval 60 + 30
        report = self.run_check(h)
        self.assertEqual([b for b in report.breaches if b.invariant == "audit"], [])
        self.assertFalse(report.figures["audits"]["end_judged"])
        self.assertIn("end of the run NOT judged", report.text())
        h.audits(560.0, 600.0, rc=0)  # an audit in line after the fault: judged, and in line
        self.assertTrue(self.run_check(h).figures["audits"]["end_judged"])


class LeaderElection(Case):
    def test_an_invalid_config_fires(self) -> None:
        h = Hist().add(50.0, "leader_election_config", ns="knative-eventing", data={"lease-duration": "1s"},
                       valid=False, why="leaseDuration below renewDeadline")
        found = self.breaches(h, "leader-election")
        self.assertEqual([b.subject for b in found], ["knative-eventing/config-leader-election"])


class SpecFlips(Case):
    def storm(self, h: Hist, t0: float, obj: str = f"deployment/{ACTIVATOR}") -> Hist:
        for i in range(6):
            h.add(t0 + 5.0 * i, "spec", object=obj, hash="ab"[i % 2], generation=10 + i)
        return h

    def test_a_flip_storm_fires_once(self) -> None:
        found = self.breaches(self.storm(Hist(), 300.0), "spec-flips")
        self.assertEqual([(b.t, b.subject) for b in found], [(320.0, f"deployment/{ACTIVATOR}")])
        self.assertIn("6 spec changes", found[0].message)

    def test_changes_in_a_policy_edit_window_are_quiet(self) -> None:
        h = Hist()
        h.fault("policy_edit", 290.0, 300.0)
        self.assertEqual(self.breaches(self.storm(h, 300.0), "spec-flips"), [])  # window: until 330

    def test_the_same_hash_seen_again_is_not_a_change(self) -> None:
        h = Hist()
        for i in range(8):
            h.add(300.0 + i, "spec", object=f"hpa/{ACTIVATOR}", hash="same", generation=3)
        self.assertEqual(self.breaches(h, "spec-flips"), [])


class Admission(Case):
    def test_a_rejection_fires(self) -> None:
        found = self.breaches(Hist().bump(101.0, "rejections"), "admission")
        self.assertEqual([b.t for b in found], [102.0])

    def test_fail_open_while_no_webhook_answers_is_quiet(self) -> None:
        h = Hist().during(200.0, 220.0, webhooks_up=0).bump(210.0, "fail_open", 3)
        self.assertEqual(self.breaches(h, "admission"), [])
        h = Hist().during(200.0, 220.0, webhooks_up=0).bump(224.5, "fail_open")  # 4.5 s after: still expected
        self.assertEqual(self.breaches(h, "admission"), [])

    def test_fail_open_with_two_webhooks_up_fires(self) -> None:
        found = self.breaches(Hist().bump(300.0, "fail_open"), "admission")
        self.assertEqual([b.t for b in found], [300.0])
        self.assertIn("webhooks_up was 2", found[0].message)

    def test_a_restarted_api_server_counts_from_its_epoch(self) -> None:
        h = Hist(admission=False)
        h.add(1.0, "admission", requests=50.0, rejections=0.0, fail_open=2.0, webhooks_up=2, apiserver_epoch=0)
        h.add(3.0, "admission", requests=60.0, rejections=0.0, fail_open=2.0, webhooks_up=2, apiserver_epoch=0)
        h.add(5.0, "admission", requests=70.0, rejections=0.0, fail_open=2.0, webhooks_up=2, apiserver_epoch=1)
        found = self.breaches(h, "admission")  # 2 fail-open since the restart, as many as before it
        self.assertEqual([b.t for b in found], [5.0])

    def test_a_restarted_api_server_counts_from_zero(self) -> None:
        h = Hist(admission=False)
        for i, (t, rej) in enumerate([(1.0, 5.0), (3.0, 5.0), (5.0, 0.0), (7.0, 0.0)]):
            h.add(t + 0.25, "admission", requests=float(i), rejections=rej, fail_open=0.0, webhooks_up=2)
        self.assertEqual(self.breaches(h, "admission"), [])
        h.add(9.25, "admission", requests=9.0, rejections=1.0, fail_open=0.0, webhooks_up=2)
        self.assertEqual(len(self.breaches(h, "admission")), 1)


class Memory(Case):
    def product(self, h: Hist, rss: Callable[[float], int], t0: float = 0.0, t1: float = 600.0) -> Hist:
        t = t0
        while t < t1:
            h.add(t, "product", replica="webhook-a", rss_kib=rss(t), up=True)
            t += 5.0
        return h

    def test_growing_memory_fires(self) -> None:
        h = self.product(Hist(product=False), lambda t: 20000 + int(t * 100))
        found = self.breaches(h, "memory")
        self.assertEqual([b.subject for b in found], ["webhook-a"])

    def test_a_new_pid_starts_a_new_lifetime(self) -> None:
        h = Hist(product=False)
        for i in range(120):
            t = i * 5.0
            h.add(t, "product", replica="webhook-0", rss_kib=30000 if t < 300 else 60000, up=True,
                  pid=100 if t < 300 else 200)
        report = self.run_check(h)
        self.assertEqual([b for b in report.breaches if b.invariant == "memory"], [])
        self.assertEqual(report.figures["memory"]["webhook-0"]["lifetimes"], 2)
        self.assertEqual(report.figures["memory"]["webhook-0"]["max_rss_kib"], 60000)

    def test_growth_over_two_lifetimes_is_not_one(self) -> None:
        h = Hist(product=False)
        self.product(h, lambda t: 30000, 0.0, 300.0)
        h.add(300.0, "product", replica="webhook-a", rss_kib=0, up=False)
        self.product(h, lambda t: 60000, 305.0, 600.0)
        report = self.run_check(h)
        self.assertEqual([b for b in report.breaches if b.invariant == "memory"], [])
        self.assertEqual(report.figures["memory"]["webhook-a"]["lifetimes"], 2)


class HistoryFile(Case):
    def test_a_truncated_last_line_is_left_out(self) -> None:
        path = Hist(duration=30.0).write(self.tmp.name)
        with path.open("a") as f:
            f.write('{"t": 30.5, "type": "sam')
        report = check(path)
        self.assertTrue(report.truncated)
        self.assertIn("last line truncated", report.text())

    def test_a_broken_line_inside_is_an_error(self) -> None:
        path = Path(self.tmp.name) / "h.jsonl"
        path.write_text('{"t": 0, "type": "run", "seed": 1}\nnot json\n{"t": 1, "type": "note", "text": ""}\n')
        with self.assertRaisesRegex(HistoryError, "h.jsonl:2"):
            check(path)
        path.write_text('{"t": 0, "type": "note", "text": ""}\n')
        with self.assertRaisesRegex(HistoryError, "run line"):
            check(path)

    def test_component_of_a_pod(self) -> None:
        comps = [ACTIVATOR, "knative-serving/autoscaler", "knative-serving/autoscaler-hpa"]
        self.assertEqual(chaos_check.component_of("knative-serving/autoscaler-hpa-7f9-abcde", comps),
                         "knative-serving/autoscaler-hpa")
        self.assertEqual(chaos_check.component_of("knative-serving/autoscaler-6c9-abcde", comps),
                         "knative-serving/autoscaler")
        self.assertIsNone(chaos_check.component_of("kourier-system/3scale-kourier-gateway-1-2", comps))


class Main(Case):
    def test_exit_codes_and_the_report(self) -> None:
        h = Hist()
        fid = h.fault("zone_loss", 200.0, 240.0, target="zone-b", detail={"nodes": ["b1", "b2"]})
        h.during(200.0, 240.0, nodes_ready=4, on_lost={ACTIVATOR: 1}, ready={ACTIVATOR: 2})
        h.fault("drain", 220.0, 235.0, target="node-a1", end_detail={"done": True, "evictions": {"201": 1}})
        clean = h.write(self.tmp.name)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(chaos_check.main([str(clean)]), 0)
        text = out.getvalue()
        self.assertIn("faults (2):", text)
        self.assertIn("2 overlapped another", text)
        h.during(210.0, 211.0, ready={ACTIVATOR: 0})
        broken = h.write(self.tmp.name)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.assertEqual(chaos_check.main([str(broken)]), 1)
        text = out.getvalue()
        self.assertIn("breaches (1):", text)
        self.assertIn(f"#{fid} zone_loss zone-b (step 1", text)
        self.assertIn("replay: scripts/measure/chaos --seed 7 --duration 10m --faults drain,zone_loss --interval 60",
                      text)
        self.assertIn('"t": 205.0', text)
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertEqual(chaos_check.main([str(Path(self.tmp.name) / "missing.jsonl")]), 2)
        self.assertIn("chaos_check:", err.getvalue())


if __name__ == "__main__":
    unittest.main()
