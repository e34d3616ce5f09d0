"""The chaos soak's faults on what is applied: policy_edit, policy_invalid, policy_recreate,
upgrade/downgrade, hpa_min (chaos.py's docstring says what each does; chaos_faults.Nemesis runs them).
"""
from __future__ import annotations

import json
import subprocess
import time

import yaml

import cluster
from chaos_nemesis import NemesisCore, Skip
from chaos_stage import GOVERNED, POLICIES, PRODUCT_NAMESPACES, transient


class ConfigFaults(NemesisCore):
    """A recommended policy changed, made invalid or re-created and put back; a release moved; an HPA's floor raised."""

    # -- policies --
    def apply_policy(self, fid: int | None, name: str, text: str, what: str, expect_refused: bool = False) -> subprocess.CompletedProcess:
        r = self.kubectl.run("apply", "-f", "-", stdin=text, check=False, timeout=60)
        fields = {"expect_refused": True} if expect_refused else {}
        self.h.write("apply", what=what, rc=r.returncode, stderr=r.stderr[-2000:], fault_id=fid, policy=name,
                     transient=transient(r.stderr), **fields)
        return r

    def apply_policy_retrying(self, fid, name: str, text: str, what: str) -> bool:
        """A policy applied back: tried again (and recorded each time) while the API server is away."""
        deadline = time.monotonic() + 180
        while True:
            r = self.apply_policy(fid, name, text, what)
            if r.returncode == 0 or not transient(r.stderr) or time.monotonic() > deadline:
                return r.returncode == 0
            time.sleep(3)

    def policy_ready(self, name: str, limit_s: float = 30) -> dict | None:
        """The policy's Ready condition at its generation (or None by `limit_s`)."""
        def cond():
            hap = json.loads(self.kubectl.run("get", "highavailabilitypolicy", name, "-o", "json").stdout)
            gen = hap["metadata"].get("generation")
            for c in hap.get("status", {}).get("conditions", []):
                if c["type"] == "Ready" and c.get("observedGeneration", gen) == gen:
                    return {k: c.get(k) for k in ("status", "reason", "message")}
            return None

        try:
            return cluster.wait_for(cond, f"policy {name} Ready", limit_s, 1)
        except AssertionError:
            return None

    def put_back(self, fid: int, name: str, what: str) -> tuple[bool, dict | None]:
        """The recommended version of the policy applied again (`policy NAME WHAT` in the history) and, once
        that succeeded, its Ready condition."""
        ok = self.apply_policy_retrying(fid, name, yaml.safe_dump(self.stage.policy_docs[name]), f"policy {name} {what}")
        return ok, (self.policy_ready(name) if ok else None)

    def pick_policy(self, fid, rng, state, needs_le: bool = False) -> str:
        names = [n for n in POLICIES if not self.busy.is_held(f"policy:{n}")
                 and (not needs_le or "leaderElection" in self.stage.policy_docs[n]["spec"])]
        if not names:
            raise Skip("every policy is held")
        name = rng.choice(names)
        if not self._hold(state, [f"policy:{name}"], fid):
            raise Skip(f"policy {name} held")
        return name

    def f_policy_edit(self, fid, rng, state):
        name = self.pick_policy(fid, rng, state)
        doc = json.loads(json.dumps(self.stage.policy_docs[name]))
        spec = doc["spec"]
        edits = ["replicas", "pdb"] + (["buckets"] if "leaderElection" in spec else [])
        edit = rng.choice(edits)
        if edit == "replicas":
            spec["replicas"] = 4 if spec.get("replicas", 3) == 3 else 3
            change = {"replicas": [self.stage.policy_docs[name]["spec"].get("replicas"), spec["replicas"]]}
        elif edit == "pdb":
            spec["podDisruptionBudget"] = rng.choice([{"maxUnavailable": 2}, {"minAvailable": "50%"}, {"maxUnavailable": "34%"}])
            change = {"podDisruptionBudget": [self.stage.policy_docs[name]["spec"].get("podDisruptionBudget"), spec["podDisruptionBudget"]]}
        else:
            spec["leaderElection"]["buckets"] = rng.choice([b for b in (1, 3, 7, 10) if b != spec["leaderElection"].get("buckets")])
            change = {"buckets": [self.stage.policy_docs[name]["spec"]["leaderElection"].get("buckets"), spec["leaderElection"]["buckets"]]}
        back_s = rng.uniform(30, 90)
        self._start(fid, "policy_edit", name, {"edit": edit, "change": change, "back_after_s": round(back_s, 1)}, state)
        r = self.apply_policy(fid, name, yaml.safe_dump(doc), f"policy {name} edit {edit}")
        ready1 = self.policy_ready(name) if r.returncode == 0 else None
        time.sleep(back_s)
        ok_back, ready2 = self.put_back(fid, name, "back")
        ok = r.returncode == 0 and ok_back and (ready1 or {}).get("status") == "True" and (ready2 or {}).get("status") == "True"
        return ok, {"edit": edit, "change": change, "rc": r.returncode, "ready_after_edit": ready1, "ready_after_back": ready2}

    def f_policy_invalid(self, fid, rng, state):
        name = self.pick_policy(fid, rng, state)
        doc = json.loads(json.dumps(self.stage.policy_docs[name]))
        spec = doc["spec"]
        kinds = ["replicas-0", "pdb-both"] + (["renew-over-lease", "buckets-11"] if "leaderElection" in spec else [])
        kind = rng.choice(kinds)
        if kind == "replicas-0":
            spec["replicas"] = 0
        elif kind == "pdb-both":
            spec["podDisruptionBudget"] = {"maxUnavailable": 1, "minAvailable": 1}
        elif kind == "renew-over-lease":
            spec["leaderElection"]["renewDeadline"] = "90s"
        else:
            spec["leaderElection"]["buckets"] = 11
        back_s = rng.uniform(10, 30)
        self._start(fid, "policy_invalid", name, {"invalid": kind, "webhooks_up": self.stage.replicas.count_up()}, state)
        r = self.apply_policy(fid, name, yaml.safe_dump(doc), f"policy {name} invalid {kind}", expect_refused=True)
        refused = r.returncode != 0
        cond = None
        if not refused:  # admitted (the validating webhook not answering): must be reported invalid
            time.sleep(5)
            cond = self.policy_ready(name, 20)
        time.sleep(back_s)
        ok_back, ready = self.put_back(fid, name, "back")
        ok = (refused or (cond or {}).get("status") == "False") and ok_back and (ready or {}).get("status") == "True"
        return ok, {"invalid": kind, "refused": refused, "stderr": r.stderr[-500:], "condition_if_admitted": cond,
                    "ready_after_back": ready}

    def f_policy_recreate(self, fid, rng, state):
        name = self.pick_policy(fid, rng, state)
        gap_s = rng.uniform(5, 20)
        self._start(fid, "policy_recreate", name, {"recreate_after_s": round(gap_s, 1)}, state)
        r = self.kubectl.run("delete", "highavailabilitypolicy", name, "--wait=true", check=False, timeout=60)
        time.sleep(gap_s)
        ok_back, ready = self.put_back(fid, name, "re-created")
        ok = r.returncode == 0 and ok_back and (ready or {}).get("status") == "True"
        return ok, {"delete_rc": r.returncode, "delete_stderr": r.stderr[-300:], "ready_after_create": ready}

    # -- releases --
    def f_upgrade(self, fid, rng, state):
        products = [p for p in ("serving", "eventing") if not self.busy.is_held(f"release:{p}")]
        if not products:
            raise Skip("both products are being upgraded")
        product = rng.choice(products)
        if not self._hold(state, [f"release:{product}"], fid):
            raise Skip(f"{product} held")
        frm = self.release[product]
        to = "1.23" if frm == "1.20" else "1.20"
        how = rng.choice(["client-side", "server-side"])
        fault = "upgrade" if to > frm else "downgrade"
        self._start(fid, fault, product, {"from": frm, "to": to, "how": how}, state)
        rcs = []
        for path in self.stage.release_files(product, to):
            what = f"{product} {frm}->{to} {path.parent.name}/{path.name}"
            deadline = time.monotonic() + 180
            while True:  # the API server away: kubectl again, each attempt recorded
                rc, stderr = self.stage.apply_release(path, how, fid, what)
                if rc == 0 or not transient(stderr) or time.monotonic() > deadline:
                    break
                time.sleep(3)
            rcs.append(rc)
        self.release[product] = to
        rollouts = self.stage.rollouts(PRODUCT_NAMESPACES[product], 240)
        ok = all(rc == 0 for rc in rcs) and all(rollouts.values())
        return ok, {"from": frm, "to": to, "how": how, "rcs": rcs,
                    "rollouts_not_done": sorted(k for k, v in rollouts.items() if not v)}

    f_downgrade = f_upgrade

    # -- an HPA --
    def f_hpa_min(self, fid, rng, state):
        hpas = {}
        for ns in GOVERNED:
            for h in self.http.get(f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers")["items"]:
                key = f"{ns}/{h['metadata']['name']}"
                if not self.busy.is_held(f"hpa:{key}"):
                    hpas[key] = h
        if not hpas:
            raise Skip("no HPA free")
        key = rng.choice(sorted(hpas))
        if not self._hold(state, [f"hpa:{key}"], fid):
            raise Skip(f"{key} held")
        ns, name = key.split("/")
        before = hpas[key]["spec"]
        raised = before.get("minReplicas", 1) + rng.randint(1, 2)
        back_s = rng.uniform(30, 90)
        path = f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers/{name}"
        self._start(fid, "hpa_min", key, {"min": [before.get("minReplicas", 1), raised], "max": before["maxReplicas"],
                                          "back_after_s": round(back_s, 1)}, state)
        code, text = self.http.merge(path, {"spec": {"minReplicas": raised, "maxReplicas": max(before["maxReplicas"], raised)}})
        after = json.loads(text)["spec"] if code == 200 else {}
        time.sleep(back_s)
        restored = self.until_ok(f"{key} minReplicas back", lambda: self.http.merge(path, {"spec": {
            "minReplicas": before.get("minReplicas", 1), "maxReplicas": before["maxReplicas"]}})[0] == 200, 180)
        return code == 200 and restored, {"code": code, "stored_after_raise": {k: after.get(k) for k in ("minReplicas", "maxReplicas")},
                                          "restored": restored}
