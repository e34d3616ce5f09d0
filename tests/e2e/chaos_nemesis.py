"""The chaos soak's nemesis, its core (chaos.py): a fault every U(10, 40) s for `duration_s` seconds from
random.Random(seed), each in its own thread with its own Random, holding its targets (Busy) while it runs,
recorded as fault_start/fault_end (or a skipped note when no target is free). The faults themselves are
the f_<name> methods of the families (chaos_faults_*.py), joined in chaos_faults.Nemesis.
"""

from __future__ import annotations

import json
import random
import threading
import time
import traceback
from typing import Callable

from chaos_record import History
from chaos_stage import FIRST_RELEASE, Stage


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


class NemesisCore:
    """The schedule and the bookkeeping every fault shares; the state of the node and release faults too."""

    def __init__(self, stage: Stage, history: History, log: Callable[[str], None], seed: int, faults: list[str],
                 duration_s: float):
        self.stage = stage
        self.h = history
        self.log = log
        self.http = stage.http
        self.kubectl = stage.sim.kubectl
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
            self.log(f"fault {fid} {fault}: skipped ({e})")
            return
        except Exception as e:  # noqa: BLE001 - recorded as a failed fault
            ok, detail = False, {"error": f"{type(e).__name__}: {str(e)[:500]}", "trace": traceback.format_exc()[-1500:]}
            if not state["started"]:
                self._start(fid, state.get("name", fault), "?", {}, state)
        finally:
            self.busy.free(state["keys"])
        line = self.h.write("fault_end", id=fid, fault=state.get("name", fault), ok=ok, detail=detail)
        self.ended.append(line)
        self.log(f"fault {fid} {state.get('name', fault)} ended ok={ok} {json.dumps(detail, default=str)[:300]}")

    def _start(self, fid: int, fault: str, target: str, detail: dict, state: dict) -> None:
        state["started"] = True
        state["name"] = fault
        line = self.h.write("fault_start", id=fid, fault=fault, target=target, detail=detail)
        self.started.append(line)
        self.log(f"fault {fid} {fault} -> {target} {json.dumps(detail, default=str)[:200]}")

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
        self.log(f"restore step failed: {what}: {last}")
        return False
