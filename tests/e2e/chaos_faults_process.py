"""The chaos soak's faults on processes: webhook_kill, leader_kill, apiserver_restart (chaos.py's docstring
says what each does; chaos_faults.Nemesis runs them).
"""
from __future__ import annotations

import json
import time

from chaos_nemesis import NemesisCore, Skip
from install import NAMESPACE

LEASE = "knative-ha-webhook-reconcile"
APISERVER_GRACE_S = 10  # kube-apiserver's graceful stop keeps watches open until it is killed


class ProcessFaults(NemesisCore):
    """A webhook replica (any, or the reconcile Lease's holder) killed and started again; the API server restarted."""

    # -- the webhook replicas --
    def kill_replica(self, fid, rng, state, fault: str, name: str) -> tuple[bool, dict]:
        reps = self.stage.replicas
        down_s = rng.uniform(5, 30)
        self._start(fid, fault, name, {"replica": name, "restart_after_s": round(down_s, 1),
                                       "webhooks_up_before": reps.count_up()}, state)
        reps.kill(name)
        time.sleep(down_s)
        ok = self.until_ok(f"restart {name}", lambda: reps.restart(name) or True, 300, 5)
        return ok, {"replica": name, "restarted": ok, "down_s": round(down_s, 1)}

    def f_webhook_kill(self, fid, rng, state):
        names = [n for n in self.stage.replicas.names if not self.busy.is_held(f"replica:{n}")]
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
        if name not in self.stage.replicas.names:
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
            took = self.stage.restart_apiserver(down_s, grace_s=grace_s)
            return True, {"seconds": round(took, 1), "down_s": round(down_s, 1)}
        finally:
            self.apiserver_lock.release()
