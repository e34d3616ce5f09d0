"""The chaos soak's faults on nodes and pods: node_loss, zone_loss, drain, eviction_storm, priority_burst
(chaos.py's docstring says what each does; chaos_faults.Nemesis runs them).
"""
from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from typing import Callable, Iterable

import cluster
from chaos_nemesis import NemesisCore, Skip
from chaos_stage import GOVERNED, component_of
from simcluster import NODES, ZONES

DRAIN_S = 60
RETRY_S = 5
STORM_S = 20
BURST_S = 30


def in_parallel(fn: Callable, items: Iterable, deadline: float | None = None) -> None:
    """fn(item) for each item, each in its own thread, then each waited for until `deadline` (monotonic
    clock) + 25 s, or 25 s without one."""
    threads = [threading.Thread(target=fn, args=(x,), daemon=True) for x in items]
    for t in threads:
        t.start()
    for t in threads:
        t.join((max(0.1, deadline - time.monotonic()) if deadline is not None else 0) + 25)


class NodeFaults(NemesisCore):
    """Nodes lost and given back, Evictions (a drain's, a storm's), a burst of higher-priority pods."""

    # -- nodes lost --
    def live_nodes(self) -> list[str]:
        return [n for n in NODES if n not in self.stage.sim.lost]

    def lose(self, fid: int, nodes: list[str]) -> None:
        with self.lost_lock:
            for n in nodes:
                self.lost_by.setdefault(n, set()).add(fid)
            self.stage.sim.kubelets.lose(nodes)
        self.delete_pods_on(nodes, fid)

    def delete_pods_on(self, nodes: list[str], fid: int) -> int:
        """The pods bound to `nodes` deleted at once (the taint eviction, toleration run out); counted per
        component for the samples' on_lost while the nodes stay lost."""
        n = 0
        pods = self.http.get("/api/v1/pods")["items"]
        for p in pods:
            if p["spec"].get("nodeName") in nodes:
                ns, name = p["metadata"]["namespace"], p["metadata"]["name"]
                code, _ = self.http.call("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}", {"gracePeriodSeconds": 0})
                k = component_of(p)
                if code == 200 and k and not p["metadata"].get("deletionTimestamp"):
                    with self.lost_lock:
                        by = self.lost_deleted.setdefault(fid, {})
                        by[k] = by.get(k, 0) + 1
                n += 1
        return n

    def deleted_by_losses(self) -> dict[str, int]:
        """Pods per component deleted from nodes that are still lost (losses not ended)."""
        out: dict[str, int] = {}
        with self.lost_lock:
            for by in self.lost_deleted.values():
                for k, n in by.items():
                    out[k] = out.get(k, 0) + n
        return out

    def back(self, fid: int, nodes: list[str]) -> list[str]:
        """The nodes a fault took down serve again (Ready, untainted) unless another fault still holds them."""
        restored = []
        with self.lost_lock:
            self.lost_deleted.pop(fid, None)
            for n in nodes:
                holders = self.lost_by.get(n, set())
                holders.discard(fid)
                if holders:
                    continue
                kub = self.stage.sim.kubelets

                def up(n=n) -> bool:
                    code, text = self.http.merge(f"/api/v1/nodes/{n}", {"spec": {"taints": None}})
                    if code != 200:
                        raise AssertionError(f"untaint {n}: {code} {text[:200]}")
                    kub._status(n, ready=True)
                    return True

                self.until_ok(f"node {n} back", up)
                kub.lost.discard(n)
                restored.append(n)
        return restored

    def hold_lost(self, fid: int, nodes: list[str], seconds: float) -> None:
        """While the nodes are down, pods the scheduler still bound there are deleted too (every 5 s)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(min(5, max(0.1, end - time.monotonic())))
            try:
                self.delete_pods_on(nodes, fid)
            except Exception:  # noqa: BLE001 - the API server away
                pass

    def f_node_loss(self, fid, rng, state):
        candidates = [n for n in self.live_nodes() if not self.busy.is_held(f"node:{n}")]
        if not candidates:
            raise Skip("no live node")
        node = rng.choice(sorted(candidates))
        if not self._hold(state, [f"node:{node}"], fid):
            raise Skip(f"{node} held")
        back_s = rng.uniform(30, 90)
        self._start(fid, "node_loss", node, {"nodes": [node], "back_after_s": round(back_s, 1)}, state)
        self.lose(fid, [node])
        self.hold_lost(fid, [node], back_s)
        restored = self.back(fid, [node])
        return True, {"nodes": [node], "restored": restored}

    def f_zone_loss(self, fid, rng, state):
        zones = [z for z in ZONES if all(n in self.live_nodes() and not self.busy.is_held(f"node:{n}")
                                         for n, zz in NODES.items() if zz == z)]
        if not zones:
            raise Skip("no zone with both nodes up")
        zone = rng.choice(zones)
        nodes = [n for n, z in NODES.items() if z == zone]
        if not self._hold(state, [f"node:{n}" for n in nodes], fid):
            raise Skip(f"{zone} held")
        back_s = rng.uniform(30, 90)
        self._start(fid, "zone_loss", zone, {"nodes": nodes, "back_after_s": round(back_s, 1)}, state)
        self.lose(fid, nodes)
        self.hold_lost(fid, nodes, back_s)
        restored = self.back(fid, nodes)
        return True, {"nodes": nodes, "restored": restored}

    # -- evictions --
    def evict(self, fid: int, ns: str, name: str, uid: str | None = None) -> tuple[int, str]:
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns}}
        if uid:
            body["deleteOptions"] = {"preconditions": {"uid": uid}}
        code, text = self.http.call("POST", f"/api/v1/namespaces/{ns}/pods/{name}/eviction", body)
        if code:
            msg = ""
            if code != 201:
                try:
                    msg = json.loads(text).get("message", "")[:300]
                except ValueError:
                    msg = text[:300]
            self.h.write("eviction", pod=f"{ns}/{name}", code=code, fault_id=fid, **({"message": msg} if msg else {}))
        return code, text

    def f_drain(self, fid, rng, state):
        candidates = [n for n in self.live_nodes() if not self.busy.is_held(f"node:{n}")
                      and not self.busy.is_held(f"drain:{n}")]
        if not candidates:
            raise Skip("no node to drain")
        node = rng.choice(sorted(candidates))
        if not self._hold(state, [f"drain:{node}"], fid):
            raise Skip(f"{node} held")
        self._start(fid, "drain", node, {"nodes": [node]}, state)
        t0 = time.monotonic()
        deadline = t0 + DRAIN_S
        counts: dict[str, int] = {"201": 0, "429": 0, "500": 0}
        blocked: set[str] = set()
        errors: list[str] = []
        lock = threading.Lock()
        self.until_ok(f"cordon {node}", lambda: self.http.merge(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": True}})[0] == 200, 60)
        pods = [p for p in self.http.get("/api/v1/pods")["items"] if p["spec"].get("nodeName") == node
                and not p["metadata"].get("deletionTimestamp")
                and not any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences") or [])]

        def one(p: dict) -> None:
            ns, name, uid = p["metadata"]["namespace"], p["metadata"]["name"], p["metadata"]["uid"]
            while time.monotonic() < deadline:
                code, text = self.evict(fid, ns, name, uid)
                with lock:
                    if code:
                        counts[str(code)] = counts.get(str(code), 0) + 1
                if code == 201:
                    break
                if code == 429:
                    for m in re.finditer(r"[Tt]he disruption budget ([a-z0-9.-]+)", text):
                        with lock:
                            blocked.add(f"{ns}/{m.group(1)}")
                    time.sleep(RETRY_S)
                    continue
                if code in (404, 409):  # gone, or replaced under the same name
                    return
                if code == 0:  # the API server away: kubectl's own retry
                    time.sleep(1)
                    continue
                with lock:  # kubectl drain gives up on this pod (and fails) on any other answer
                    errors.append(f"{ns}/{name}: {code} {text[:200]}")
                return
            else:
                return

            def gone() -> bool:
                code, text = self.http.call("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
                return code == 404 or (code == 200 and json.loads(text)["metadata"]["uid"] != uid)

            cluster.wait_for_bool(gone, max(0.5, deadline - time.monotonic()), 0.25)

        in_parallel(one, pods, deadline)
        uids = {p["metadata"]["uid"] for p in pods}
        left = []
        try:
            left = [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in self.http.get("/api/v1/pods")["items"]
                    if p["spec"].get("nodeName") == node and p["metadata"]["uid"] in uids]
        except AssertionError as e:
            errors.append(str(e)[:200])
        done = not left and not errors
        self.until_ok(f"uncordon {node}", lambda: self.http.merge(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": False}})[0] == 200)
        return done, {"nodes": [node], "done": done, "blocked_by": sorted(blocked), "evictions": counts, "pods": len(pods),
                      "left": left, "errors": errors, "seconds": round(time.monotonic() - t0, 1)}

    def components(self, min_replicas: int = 2) -> dict[str, dict]:
        out = {}
        for d in self.http.get("/apis/apps/v1/deployments")["items"]:
            if d["metadata"]["namespace"] in GOVERNED and d["spec"].get("replicas", 1) >= min_replicas:
                out[f"{d['metadata']['namespace']}/{d['metadata']['name']}"] = d
        return out

    def f_eviction_storm(self, fid, rng, state):
        comps = {k: d for k, d in self.components().items() if not self.busy.is_held(f"storm:{k}")}
        if not comps:
            raise Skip("no component with 2 replicas or more")
        key = rng.choice(sorted(comps))
        if not self._hold(state, [f"storm:{key}"], fid):
            raise Skip(f"{key} held")
        ns = key.split("/")[0]
        labels = comps[key]["spec"]["selector"].get("matchLabels", {})
        selector = urllib.parse.quote(",".join(f"{k}={v}" for k, v in labels.items()))
        self._start(fid, "eviction_storm", key, {"selector": labels, "seconds": STORM_S}, state)
        counts: dict[str, int] = {}
        lock = threading.Lock()
        end = time.monotonic() + STORM_S
        rounds = 0
        while time.monotonic() < end:
            rounds += 1
            try:
                pods = [p for p in self.http.get(f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}")["items"]
                        if not p["metadata"].get("deletionTimestamp")]
            except AssertionError:
                time.sleep(1)
                continue

            def one(p):
                code, _ = self.evict(fid, ns, p["metadata"]["name"])
                with lock:
                    counts[str(code)] = counts.get(str(code), 0) + 1

            in_parallel(one, pods)
            time.sleep(1)
        return counts.get("500", 0) == 0, {"component": key, "rounds": rounds, "evictions": counts}

    # -- capacity --
    def f_priority_burst(self, fid, rng, state):
        if not self._hold(state, ["burst"], fid):
            raise Skip("a burst is running")
        live = self.live_nodes()
        replicas = len(live) + rng.randint(0, 2)
        cpu = rng.choice(["2500m", "3", "3500m"])
        name = f"burst-{fid}"
        self._start(fid, "priority_burst", name, {"replicas": replicas, "cpu": cpu, "priority": 1000, "seconds": BURST_S}, state)
        dep = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": "default"},
               "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": {
                   "metadata": {"labels": {"app": name, "chaos": "burst"}},
                   "spec": {"priorityClassName": "sim-burst", "containers": [{
                       "name": "burst", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": cpu}}}]}}}}
        r = self.kubectl.run("apply", "-f", "-", stdin=json.dumps(dep), check=False, timeout=60)
        time.sleep(BURST_S)
        placed = 0
        try:
            placed = sum(1 for p in self.http.get(f"/api/v1/namespaces/default/pods?labelSelector=app%3D{name}")["items"]
                         if p.get("status", {}).get("phase") == "Running")
        except AssertionError:
            pass
        removed = self.until_ok(f"delete {name}", lambda: self.kubectl.run(
            "-n", "default", "delete", "deployment", name, "--ignore-not-found", "--wait=false", check=False, timeout=60).returncode == 0)
        # its pods go with the garbage collector; deleted at once here (the capacity back)
        self.until_ok(f"{name} pods gone", lambda: self.kubectl.run(
            "-n", "default", "delete", "pods", "-l", f"app={name}", "--grace-period=0", "--force", "--wait=false",
            check=False, timeout=60).returncode == 0, 60)
        return r.returncode == 0 and removed, {"created_rc": r.returncode, "running_after_s": placed, "removed": removed}

