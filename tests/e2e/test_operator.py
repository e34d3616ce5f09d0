"""The real Knative Operator on the simulated multi-zone cluster: Operator alone against Operator + the
product installed as recommended (knoperator.py is the harness).

Two variants, each on its own simulated cluster (6 nodes, 3 zones) with the Operator running:

- `alone`: the Operator's own HA, `spec.high-availability.replicas: 3` on the KnativeServing and the
  KnativeEventing;
- `product`: no HA in the Knative CRs; the chart (`--set knativeOperator=true`, governedNamespaces
  knative-serving and knative-eventing), its server, examples/priorityclass.yaml, examples/policy.yaml
  unchanged, and for Eventing examples/policies/knative-eventing.yaml (a stand-in until it exists).

The KnativeServing enables Kourier (the Operator puts its gateway in knative-serving) and starts at
`spec.version: "1.22"`. In order, per variant: 1 install, 2 a drain of a node holding an activator, 4 the
upgrade to 1.23, 5 the webhook down during an Operator pass (product), 3 both setting HA, 8 a policy
with governOperatorOwned: false (product), 6 delete and reinstall, 7 KnativeEventing. setUpClass runs
it all and prints a table per scenario; each test asserts one scenario's facts.

KHW_OPERATOR_VARIANTS picks the variants (default `alone,product`); KHW_OPERATOR_SERIAL=1 runs them one
after the other instead of at once. Needs KHW_KNATIVE_OPERATOR (see knoperator.py) and the four
control-plane binaries in KUBEBUILDER_ASSETS; one skip line otherwise.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import threading
import time
import traceback
import unittest
from pathlib import Path

import knoperator
from base import binary
from cluster import wait_for
from knoperator import EVENTING, EVENTING_POLICY, ONE_REPLICA_BY_DESIGN, POLICY, SERVING, OperatorCluster

SERVING_SPEC = {"version": "1.22", "ingress": {"kourier": {"enabled": True}},
                "config": {"network": {"ingress-class": "kourier.ingress.networking.knative.dev"}}}
OPERATOR_HA = {"high-availability": {"replicas": 3}}
BOTH_SET = {"high-availability": {"replicas": 2}, "workloads": [{"name": "autoscaler", "replicas": 4}]}
# Per field of the both-set scenario: the KnativeServing's value and examples/policy.yaml's.
BOTH_FIELDS = {
    "Deployment/controller spec.replicas": ("controller", None, 2, 3),
    "Deployment/autoscaler spec.replicas": ("autoscaler", None, 4, 3),
    "HPA/activator minReplicas": ("activator", 0, 2, 5),
    "HPA/webhook minReplicas": ("webhook", 0, 2, 3),
    "HPA/3scale-kourier-gateway minReplicas": ("3scale-kourier-gateway", 0, 2, 3),
}
EVENTING_STAND_IN = """apiVersion: knativeha.dev/v1alpha1
kind: HighAvailabilityPolicy
metadata:
  name: eventing
spec:
  targetNamespace: knative-eventing
  replicas: 3
  leaderElection:
    enabled: true
  podDisruptionBudget:
    maxUnavailable: 1
"""
REST_S = 60
DRAIN_S = 60
IN_SECONDS = 30  # "a drain finishes in seconds"
RESTORE_S = 180
OVERRIDES_S = 120  # status.operatorOverrides after the KnativeServing's change
BUDGETS_BACK_S = 150
SCENARIOS = {
    "1": "install (Serving 1.22 through the Operator, Kourier)",
    "2": "drain of a node holding an activator (kubectl drain --timeout 60s)",
    "3": "both setting HA (KnativeServing high-availability.replicas 2, workloads autoscaler 4; the policy)",
    "4": "upgrade through the Operator (spec.version 1.22 -> 1.23)",
    "5": "the webhook down during an Operator pass",
    "6": "delete and reinstall (the KnativeServing and the namespace knative-serving)",
    "7": "KnativeEventing: install, budgets, drain of a node holding an eventing-webhook",
    "8": "a policy with governOperatorOwned: false on an Operator install",
}


def component(d: dict) -> str:
    if d["hpa"]:
        return f"HPA {d['hpa'][0]}-{d['hpa'][1]}, {d['ready']} ready"
    return f"replicas {d['replicas']}, {d['ready']} ready"


def ha_problems(facts: dict) -> list[str]:
    """What the "done when" facts forbid: one replica of a component (a non-HPA Deployment at 1, an HPA
    floor of 1; pingsource-mt-adapter aside, which Eventing scales 0 <-> 1), a budget allowing no
    disruption."""
    out = []
    for name, d in sorted(facts["deployments"].items()):
        if name in ONE_REPLICA_BY_DESIGN:
            continue
        if d["hpa"]:
            if d["hpa"][0] < 2:
                out.append(f"{name}: HPA minReplicas {d['hpa'][0]}")
        elif d["replicas"] < 2:
            out.append(f"{name}: 1 replica")
    for name, b in sorted(facts["pdbs"].items()):
        if b["allowed"] == 0:
            out.append(f"PDB {name} ({b['budget']}) allows 0 disruptions")
    return out


def unbudgeted(facts: dict) -> list[str]:
    """Components running more than one replica that no budget covers (a drain may take them all)."""
    pdbs = facts["pdbs"]
    return [name for name, d in sorted(facts["deployments"].items())
            if (d["hpa"] or d["replicas"] > 1) and not any(b["app"] == name or p == f"{name}-pdb" for p, b in pdbs.items())]


def rest_text(r: dict) -> str:
    moved = ", ".join(f"{k} x{v}" for k, v in sorted(r["moved"].items())[:4])
    return (f"spec writes {r['spec']}, content writes {r['content']}, resourceVersion moves {r['rv']}"
            f"{' (' + moved + ')' if moved else ''}; {r['requests']} UPDATE/PATCH requests, "
            f"{r['operator_updates']} Operator 'Updating', {r['admissions']} webhook admissions over {r['seconds']:.0f}s"
            + (f" {r['requests_by']}" if r.get("requests_by") else ""))


def created(facts: dict) -> list[str]:
    return sorted(n for n, b in facts["pdbs"].items() if b["created"])


class Variant:
    """One variant run through every scenario on its own cluster: rows for the tables, data for the tests."""

    def __init__(self, name: str, workdir: str, operator: knoperator.Bundle):
        self.name = name
        self.product = name == "product"
        self.workdir = workdir
        self.operator = operator
        self.rows: dict[str, dict[str, str]] = {k: {} for k in SCENARIOS}
        self.data: dict[str, dict] = {k: {} for k in SCENARIOS}
        self.errors: dict[str, str] = {}
        self.c: OperatorCluster | None = None

    def row(self, scenario: str, metric: str, value) -> None:
        self.rows[scenario][metric] = str(value)
        print(f"  [{self.name}] {scenario}: {metric}: {value}", flush=True)

    def serving_spec(self, **extra) -> dict:
        spec = json.loads(json.dumps(SERVING_SPEC))
        if not self.product:
            spec.update(OPERATOR_HA)
        spec.update(extra)
        return spec

    # -- the run ---------------------------------------------------------------------------------
    def run(self) -> None:
        self.c = OperatorCluster(self.workdir, self.operator, binary(), self.name, self.product)
        order = ["1", "2", "4", "5", "3", "8", "6", "7"]
        try:
            self.c.start()
            print(f"  [{self.name}] API server {self.c.sim.plane.server}; kodata without Knative's webhook: "
                  f"{self.c.left_out}", flush=True)
            self.m0 = self.c.webhook_metrics() if self.product else None
            for s in order:
                if s in ("2", "3", "4", "5", "6", "8") and "1" in self.errors:
                    self.errors[s] = "not run: the install failed"
                    continue
                if s in ("5", "8") and not self.product:
                    self.row(s, "(Operator alone)", "n/a: no webhook, no policy")
                    continue
                t = time.monotonic()
                try:
                    getattr(self, f"scenario_{s}")()
                except Exception:  # noqa: BLE001 - recorded, asserted by the scenario's test
                    self.errors[s] = traceback.format_exc()
                    print(f"  [{self.name}] scenario {s} raised:\n{self.errors[s]}", flush=True)
                print(f"  [{self.name}] scenario {s} took {time.monotonic() - t:.0f}s", flush=True)
            if self.product:
                self.data["metrics"] = self.c.webhook_metrics()
        except Exception:  # noqa: BLE001
            self.errors["cluster"] = traceback.format_exc()
            print(f"  [{self.name}] the cluster failed:\n{self.errors['cluster']}", flush=True)
        finally:
            if self.c.operator is not None:
                lines = self.c.operator.lines()
                errors = [ln for ln in lines if '"level":"error"' in ln or '"severity":"ERROR"' in ln]
                self.data["operator_errors"] = errors
                print(f"  [{self.name}] Operator log: {len(lines)} lines, {len(errors)} errors "
                      f"({self.c.operator.log})", flush=True)
            self.c.stop()

    def ready_serving(self, version: str, limit_s: float = 300) -> float:
        took = self.c.wait_cr_ready("KnativeServing", SERVING, version, limit_s)
        self.c.wait_full(120)
        return took

    def install_rows(self, s: str, ns: str, facts: dict) -> None:
        for name, d in sorted(facts["deployments"].items()):
            self.row(s, f"{ns}/{name}", component(d))
        for name, b in sorted(facts["pdbs"].items()):
            self.row(s, f"PDB {name}", f"{b['budget']}: allows {b['allowed']} of {b['expected']}"
                     + (" (created by the product)" if b["created"] else ""))
        self.row(s, "budgets the product created", ", ".join(created(facts)) or "none")
        self.row(s, "config-leader-election", " ".join(f"{k}={v}" for k, v in sorted(facts["leader"].items()))
                 or "the release's (no buckets/durations set)")
        self.row(s, "HA problems (single replicas, budgets allowing 0)", "; ".join(ha_problems(facts)) or "none")
        self.row(s, "multi-replica components without a budget", ", ".join(unbudgeted(facts)) or "none")

    # -- 1 install ---------------------------------------------------------------------------------
    def scenario_1(self) -> None:
        c = self.c
        if self.product:
            sets = c.install_product([SERVING, EVENTING])
            self.row("1", "product install", "helm --set " + " --set ".join(sets)
                     + (f" [{'; '.join(c.gaps)}]" if c.gaps else ""))
            cond = c.apply_policy(POLICY.read_text(), "serving")
            self.row("1", "policy serving before Knative", f"Ready={cond['status']} {cond.get('reason', '')}")
        c.ensure_namespace(SERVING)
        c.watch(SERVING)
        t = time.monotonic()
        c.apply_cr("KnativeServing", SERVING, self.serving_spec())
        took = self.ready_serving("1.22", 400)
        self.row("1", "KnativeServing Ready (1.22)", f"after {time.monotonic() - t:.0f}s "
                 f"(version {c.cr('KnativeServing', SERVING)['status'].get('version')})")
        self.row("1", "settled after", f"{c.wait_settled(SERVING):.0f}s")
        facts = c.facts(SERVING)
        self.data["1"]["facts"] = facts
        self.install_rows("1", SERVING, facts)
        if self.product:
            self.policy_rows("1", "serving")
        rest = c.writes_at_rest(SERVING, REST_S)
        self.data["1"]["rest"] = rest
        self.row("1", f"writes at rest ({REST_S}s)", rest_text(rest))
        self.data["1"]["took"] = took

    def policy_rows(self, s: str, name: str) -> dict:
        st = self.c.policy(name).get("status", {})
        cond = next((c for c in st.get("conditions", []) if c["type"] == "Ready"), {})
        self.row(s, f"policy {name} Ready", f"{cond.get('status')} {cond.get('reason', '')}: {cond.get('message', '')[:160]}")
        self.row(s, f"policy {name} status.leftAlone", len(st.get("leftAlone") or []))
        overrides = st.get("operatorOverrides") or []
        self.row(s, f"policy {name} status.operatorOverrides", f"{len(overrides)}: " + " | ".join(overrides)[:400])
        return st

    # -- 2 drain -----------------------------------------------------------------------------------
    def scenario_2(self) -> None:
        c = self.c
        node = c.sim.node_of(SERVING, "activator")
        rows = c.sim.step("drain", lambda: c.sim.drain(node, DRAIN_S), settle_s=2)
        note = rows[0].note
        activator = next(r for r in rows if r.component == f"{SERVING}/activator")
        m = re.search(r"(done|FAILED) in ([0-9.]+)s", note)
        self.data["2"] = {"done": m.group(1) == "done", "seconds": float(m.group(2)), "min_ready": activator.min_ready,
                          "want": activator.want}
        self.row("2", "drain", note)
        self.row("2", "fewest ready activators", f"{activator.min_ready} of {activator.want}")
        fewest = {r.component.split("/")[1]: r.min_ready for r in rows}
        self.row("2", "fewest ready per component", " ".join(f"{k}={v}" for k, v in sorted(fewest.items())))
        self.row("2", "back to full count", "yes" if c.wait_full(120) else "NO after 120s")

    # -- 4 upgrade ---------------------------------------------------------------------------------
    def scenario_4(self) -> None:
        c = self.c
        before = c.facts(SERVING)

        def upgrade():
            c.patch_cr("KnativeServing", SERVING, {"spec": {"version": "1.23"}})
            took = c.wait_cr_ready("KnativeServing", SERVING, "1.23", 400)
            done = c.sim.rollout_all(180)
            return f"Ready at 1.23 after {took:.0f}s; rollouts {'done' if all(done.values()) else 'NOT done: ' + str(done)}"

        rows = c.sim.step("upgrade", upgrade)
        self.row("4", "upgrade", rows[0].note if rows else "?")
        self.row("4", "fewest ready during the upgrade", " ".join(f"{r.component.split('/')[1]}={r.min_ready}/{r.want}"
                                                                  for r in rows))
        self.row("4", "settled after", f"{c.wait_settled(SERVING):.0f}s")
        after = c.facts(SERVING)
        self.data["4"] = {"before": before, "after": after, "version": c.cr("KnativeServing", SERVING)["status"].get("version"),
                          "rows": [(r.component, r.min_ready, r.want) for r in rows]}
        self.install_rows("4", SERVING, after)
        rest = c.writes_at_rest(SERVING, 30)
        self.data["4"]["rest"] = rest
        self.row("4", "writes at rest (30s)", rest_text(rest))

    # -- 5 the webhook down ------------------------------------------------------------------------
    def scenario_5(self) -> None:
        c = self.c
        g0 = c.governed_fields(SERVING)
        m0 = c.webhook_metrics()
        c.server.stop()
        t_down = time.monotonic()
        gen = c.cr("KnativeServing", SERVING)["metadata"]["generation"]
        c.patch_cr("KnativeServing", SERVING, {"spec": {"config": {"features": {"khw-e2e-touch": "1"}}}})
        wait_for(lambda: c.cr("KnativeServing", SERVING)["metadata"]["generation"] > gen, "the touch", 10)
        c.wait_cr_ready("KnativeServing", SERVING, None, 180)
        time.sleep(5)
        g1 = c.governed_fields(SERVING)
        reverted = sorted(k for k in g0 if g1.get(k) != g0[k])
        m1 = c.webhook_metrics()
        self.data["5"] = {"reverted": reverted, "fail_open": m1["fail_open"] - m0["fail_open"],
                          "down_s": time.monotonic() - t_down}
        self.row("5", "fields the Operator's pass reverted while the webhook was down",
                 f"{len(reverted)}: " + "; ".join(f"{k}: {g0[k]} -> {g1.get(k)}" for k in reverted)[:600])
        self.row("5", "writes admitted unmutated (fail-open)", int(self.data["5"]["fail_open"]))
        t = time.monotonic()
        c.install.start_server(f"webhook-{len(c.install.servers)}")
        started = time.monotonic() - t

        def restored():
            g = c.governed_fields(SERVING)
            return all(g.get(k) == g0[k] for k in reverted)

        ok = cluster_wait(restored, RESTORE_S)
        left = [] if ok else [k for k in reverted if c.governed_fields(SERVING).get(k) != g0[k]]
        self.data["5"].update({"restored": ok, "restore_s": time.monotonic() - t, "left": left})
        self.row("5", "restored after the server started", (f"all {len(reverted)} in {time.monotonic() - t:.1f}s "
                                                            f"(server ready in {started:.1f}s)") if ok else
                 f"NOT within {RESTORE_S}s: {left[:6]}")
        c.wait_full(120)

    # -- 3 both setting HA -------------------------------------------------------------------------
    def scenario_3(self) -> None:
        c = self.c
        t_patch = time.monotonic()
        c.patch_cr("KnativeServing", SERVING, {"spec": BOTH_SET})
        c.wait_cr_ready("KnativeServing", SERVING, None, 180)
        c.wait_full(120)
        self.row("3", "settled after", f"{c.wait_settled(SERVING):.0f}s")
        facts = c.facts(SERVING)
        fields = {}
        for field, (name, hpa_index, cr_value, policy_value) in BOTH_FIELDS.items():
            d = facts["deployments"].get(name)
            if d is None:
                continue
            got = d["replicas"] if hpa_index is None else (d["hpa"][0] if d["hpa"] else None)
            winner = ("both agree" if cr_value == policy_value else "the policy" if got == policy_value
                      else "the KnativeServing" if got == cr_value else "neither")
            fields[field] = (got, winner)
            label = f"{field} (KS {cr_value}, policy {policy_value})"
            self.row("3", label, f"{got}" + (f": {winner} wins" if self.product else ""))
        rest = c.writes_at_rest(SERVING, 45)
        self.data["3"] = {"fields": fields, "rest": rest}
        self.row("3", "writes at rest after settling (45s)", rest_text(rest))
        self.row("3", "HA problems (single replicas, budgets allowing 0)", "; ".join(ha_problems(facts)) or "none")
        if self.product:
            self.overrides_probe(t_patch)

    def overrides_probe(self, t_patch: float) -> None:
        """status.operatorOverrides once both set HA: within OVERRIDES_S of the KnativeServing's change;
        if not, after a restart of the server (whose reconciler makes a full pass at start)."""
        c = self.c

        def named():
            return c.policy("serving").get("status", {}).get("operatorOverrides") or None

        ok = cluster_wait(named, max(1.0, OVERRIDES_S - (time.monotonic() - t_patch)))
        self.data["3"]["overrides_s"] = time.monotonic() - t_patch if ok else None
        self.data["3"]["status"] = self.policy_rows("3", "serving")
        self.row("3", "status.operatorOverrides after the KnativeServing's change",
                 f"named when first looked at, {self.data['3']['overrides_s']:.0f}s after the change (after the rest window)"
                 if ok else f"EMPTY after {OVERRIDES_S}s")
        if not ok:
            c.server.stop()
            t = time.monotonic()
            c.install.start_server(f"webhook-{len(c.install.servers)}")
            again = cluster_wait(named, 30)
            got = c.policy("serving").get("status", {}).get("operatorOverrides") or []
            self.data["3"]["overrides_after_restart"] = got
            self.row("3", "status.operatorOverrides after a server restart (a full pass)",
                     (f"named after {time.monotonic() - t:.0f}s: " if again else "still EMPTY after 30s")
                     + " | ".join(got)[:300])

    # -- 8 governOperatorOwned: false --------------------------------------------------------------
    def scenario_8(self) -> None:
        c = self.c
        text = POLICY.read_text().replace("\nspec:\n", "\nspec:\n  governOperatorOwned: false\n", 1)
        path = Path(self.workdir) / "policy-govern-operator-owned-false.yaml"
        path.write_text(text)
        c.kubectl.apply(str(path))

        def condition():
            cond = c.policy_condition("serving")
            return cond if cond and cond.get("reason") == "NothingGoverned" else None

        try:
            wait_for(condition, "Ready=False NothingGoverned", 60, 1)
        except AssertionError:
            pass
        st = self.policy_rows("8", "serving")
        cond = next((x for x in st.get("conditions", []) if x["type"] == "Ready"), {})
        audit = subprocess.run([binary(), "audit", "--kubeconfig", c.sim.plane.kubeconfig, "--request-timeout", "20s"],
                               capture_output=True, text=True, timeout=120)
        out = (audit.stdout + audit.stderr).strip()
        self.data["8"] = {"condition": cond, "left_alone": st.get("leftAlone") or [], "audit_rc": audit.returncode,
                          "audit": out}
        self.row("8", "leftAlone", "; ".join(f"{x.get('kind')}/{x.get('name')}: {x.get('reason', x.get('why'))}"
                                             for x in (st.get("leftAlone") or [])[:3])[:300] or "none")
        self.row("8", "knative-ha-webhook audit", f"exit {audit.returncode}: {out.splitlines()[-1][:200] if out else ''}")
        c.kubectl.apply(str(POLICY))
        try:
            wait_for(lambda: (c.policy_condition("serving") or {}).get("status") == "True", "the policy Ready again", 60, 1)
            self.row("8", "examples/policy.yaml applied again", "Ready=True")
        except AssertionError:
            self.row("8", "examples/policy.yaml applied again", f"NOT Ready=True: {c.policy_condition('serving')}")
        c.wait_settled(SERVING)

    # -- 6 delete and reinstall --------------------------------------------------------------------
    def scenario_6(self) -> None:
        c = self.c
        expected = created(c.facts(SERVING))
        mark = len(c.server_log())
        t = time.monotonic()
        c.kubectl.run("-n", SERVING, "delete", "knativeserving", SERVING, "--timeout=180s", timeout=240)
        deleted = time.monotonic() - t
        gone = c.delete_namespace(SERVING)
        self.row("6", "KnativeServing deleted, then the namespace gone", f"{deleted:.0f}s, {gone:.0f}s")
        c.watch()
        c.ensure_namespace(SERVING)
        c.watch(SERVING)
        t = time.monotonic()
        c.apply_cr("KnativeServing", SERVING, self.serving_spec(version="1.23"))
        self.ready_serving("1.23", 400)
        self.row("6", "KnativeServing Ready again", f"after {time.monotonic() - t:.0f}s")
        back = None
        if self.product:
            ok = cluster_wait(lambda: set(expected) <= set(created(c.facts(SERVING))), BUDGETS_BACK_S)
            back = time.monotonic() - t if ok else None
        self.row("6", "settled after", f"{c.wait_settled(SERVING):.0f}s")
        facts = c.facts(SERVING)
        log = c.server_log()[mark:] if self.product else ""
        forbidden = [ln for ln in log.splitlines() if "forbidden" in ln.lower()]
        self.data["6"] = {"expected": expected, "created": created(facts), "back_s": back, "forbidden": forbidden,
                          "facts": facts}
        if self.product:
            self.row("6", "created budgets back", (f"after {back:.0f}s: {', '.join(created(facts))}" if back is not None
                                                   else f"NOT within {BUDGETS_BACK_S}s: {created(facts)} of {expected}"))
            self.row("6", "'forbidden' in the server's log since the delete",
                     f"{len(forbidden)}" + (f": {forbidden[0][:300]}" if forbidden else ""))
        self.install_rows("6", SERVING, facts)

    # -- 7 KnativeEventing -------------------------------------------------------------------------
    def scenario_7(self) -> None:
        c = self.c
        c.ensure_namespace(EVENTING)
        if self.product:
            if EVENTING_POLICY.exists():
                text, source = EVENTING_POLICY.read_text(), str(EVENTING_POLICY.relative_to(knoperator.ROOT))
            else:
                text, source = EVENTING_STAND_IN, "a stand-in (examples/policies/knative-eventing.yaml does not exist)"
            path = Path(self.workdir) / "eventing-policy.yaml"
            path.write_text(text)
            name = re.search(r"^  name:\s*(\S+)", text, re.M).group(1)
            cond = c.apply_policy(str(path), name)
            self.row("7", "eventing policy", f"{source}: Ready={cond['status']} {cond.get('reason', '')}")
        c.watch(EVENTING)
        spec = {} if self.product else dict(OPERATOR_HA)
        t = time.monotonic()
        c.apply_cr("KnativeEventing", EVENTING, spec)
        c.wait_cr_ready("KnativeEventing", EVENTING, None, 400)
        c.wait_full(120)
        self.row("7", "KnativeEventing Ready", f"after {time.monotonic() - t:.0f}s "
                 f"(version {c.cr('KnativeEventing', EVENTING)['status'].get('version')})")
        self.row("7", "settled after", f"{c.wait_settled(EVENTING):.0f}s")
        facts = c.facts(EVENTING)
        self.install_rows("7", EVENTING, facts)
        if self.product:
            self.policy_rows("7", name)
        rest = c.writes_at_rest(EVENTING, 30)
        self.row("7", "writes at rest (30s)", rest_text(rest))
        node = c.sim.node_of(EVENTING, "eventing-webhook")
        rows = c.sim.step("eventing drain", lambda: c.sim.drain(node, DRAIN_S), settle_s=2)
        m = re.search(r"(done|FAILED) in ([0-9.]+)s", rows[0].note)
        webhook = next(r for r in rows if r.component == f"{EVENTING}/eventing-webhook")
        self.row("7", "drain", rows[0].note)
        self.row("7", "fewest ready eventing-webhooks", f"{webhook.min_ready} of {webhook.want}")
        self.data["7"] = {"facts": facts, "rest": rest, "done": m.group(1) == "done", "seconds": float(m.group(2))}
        c.wait_full(120)


def cluster_wait(pred, limit_s: float) -> bool:
    try:
        wait_for(pred, "", limit_s, 1)
        return True
    except AssertionError:
        return False


class OperatorScenarios(unittest.TestCase):
    variants: dict[str, Variant] = {}

    @classmethod
    def setUpClass(cls):
        if not knoperator.ready():
            raise unittest.SkipTest(knoperator.SKIP_LINE)
        operator = knoperator.bundle()
        names = [v.strip() for v in os.environ.get("KHW_OPERATOR_VARIANTS", "alone,product").split(",") if v.strip()]
        unknown = [n for n in names if n not in ("alone", "product")]
        if unknown:
            raise AssertionError(f"KHW_OPERATOR_VARIANTS: unknown {unknown} (known: alone, product)")
        parent = os.environ.get("KHW_E2E_WORKDIR") or None
        root = tempfile.mkdtemp(prefix="test_operator-", dir=parent)
        cls.variants = {n: Variant(n, tempfile.mkdtemp(prefix=f"{n}-", dir=root), operator) for n in names}
        print(f"\n== Knative Operator ({operator.binary}) on the simulated cluster: {', '.join(names)}; work dir {root}",
              flush=True)
        t = time.monotonic()
        if os.environ.get("KHW_OPERATOR_SERIAL") == "1":
            for v in cls.variants.values():
                v.run()
        else:
            threads = [threading.Thread(target=v.run, name=n) for n, v in cls.variants.items()]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
        print(f"\n== Knative Operator: every variant done in {time.monotonic() - t:.0f}s", flush=True)
        cls.print_tables()

    @classmethod
    def print_tables(cls):
        names = list(cls.variants)
        heads = {"alone": "Operator alone (high-availability.replicas 3)", "product": "Operator + product (recommended install)"}
        for s, title in SCENARIOS.items():
            print(f"\n== scenario {s}: {title}")
            metrics: list[str] = []
            for v in cls.variants.values():
                metrics += [m for m in v.rows[s] if m not in metrics]
            print(f"  {'':<62} | " + " | ".join(f"{heads[n]:<48}" for n in names))
            for m in metrics:
                print(f"  {m:<62} | " + " | ".join(f"{cls.variants[n].rows[s].get(m, '-'):<48}" for n in names))
            for n in names:
                if s in cls.variants[n].errors:
                    print(f"  [{n}] ERROR: {cls.variants[n].errors[s].strip().splitlines()[-1][:300]}")
        for n in names:
            if "cluster" in cls.variants[n].errors:
                print(f"\n  [{n}] the cluster failed: {cls.variants[n].errors['cluster'].strip().splitlines()[-1][:300]}")

    # -- helpers -----------------------------------------------------------------------------------
    def variant(self, name: str) -> Variant:
        if name not in self.variants:
            self.skipTest(f"variant {name} not run (KHW_OPERATOR_VARIANTS)")
        v = self.variants[name]
        if "cluster" in v.errors:
            self.fail(f"{name}: the cluster failed: {v.errors['cluster'].strip().splitlines()[-1]}")
        return v

    def ran(self, v: Variant, s: str) -> dict:
        if s in v.errors:
            self.fail(f"{v.name}: scenario {s} raised (traceback printed above): {v.errors[s].strip().splitlines()[-1]}")
        return v.data[s]

    def at_rest(self, rest: dict, what: str):
        self.assertEqual((rest["spec"], rest["content"]), (0, 0), f"{what}: writes at rest: {rest_text(rest)}")

    # -- the scenarios' facts ----------------------------------------------------------------------
    def test_1_install(self):
        v = self.variant("product")
        self.assertEqual(v.c.gaps, [], "contract 2: the chart for an Operator install (--set knativeOperator=true)")
        d = self.ran(v, "1")
        self.assertEqual(ha_problems(d["facts"]), [], "Operator + product after the install")
        self.assertTrue(created(d["facts"]), "the product created no budget")
        self.at_rest(d["rest"], "Operator + product after the install")

    def test_2_drain(self):
        if "alone" in self.variants:
            d = self.ran(self.variant("alone"), "2")
            self.assertFalse(d["done"], "Operator alone: the 80% budgets at 3 replicas block the drain")
        d = self.ran(self.variant("product"), "2")
        self.assertTrue(d["done"] and d["seconds"] < IN_SECONDS, f"Operator + product: the drain: {d}")
        self.assertGreaterEqual(d["min_ready"], 2, f"Operator + product: fewest ready activators: {d}")

    def test_3_both_set_ha(self):
        v = self.variant("product")
        d = self.ran(v, "3")
        self.at_rest(d["rest"], "both setting HA, after settling")
        neither = {f: w for f, w in d["fields"].items() if w[1] == "neither"}
        self.assertEqual(neither, {}, "fields holding neither side's value")
        overrides = d["status"].get("operatorOverrides") or []
        policy_won = [f for f, (_, w) in d["fields"].items() if w == "the policy"]
        after = d.get("overrides_after_restart")
        self.assertIsNotNone(d.get("overrides_s"), f"status.operatorOverrides empty {OVERRIDES_S}s after the KnativeServing "
                             f"set high-availability.replicas 2 and a workloads override (the policy won {policy_won}); "
                             f"after a server restart: {after}")
        self.assertTrue(any("high-availability.replicas" in o for o in overrides),
                        f"status.operatorOverrides names spec.high-availability.replicas: {overrides}")
        if "Deployment/autoscaler spec.replicas" in policy_won:
            self.assertTrue(any("workloads" in o for o in overrides),
                            f"status.operatorOverrides names the workloads override of autoscaler: {overrides}")

    def test_4_upgrade(self):
        d = self.ran(self.variant("product"), "4")
        self.assertTrue(str(d["version"]).startswith("1.23"), d["version"])
        self.assertEqual(ha_problems(d["after"]), [], "Operator + product after the upgrade")
        self.assertEqual(created(d["after"]), created(d["before"]), "created budgets after the upgrade")
        self.assertEqual(d["after"]["leader"], d["before"]["leader"], "config-leader-election after the upgrade")
        for comp, fewest, want in d["rows"]:
            if want > 1:
                self.assertGreaterEqual(fewest, 2, f"the upgrade: {comp} fell to {fewest} ready")
        self.at_rest(d["rest"], "after the upgrade")

    def test_5_webhook_down(self):
        d = self.ran(self.variant("product"), "5")
        self.assertTrue(d["restored"], f"the reverted fields not restored within {RESTORE_S}s: {d['left']}")

    def test_6_reinstall(self):
        v = self.variant("product")
        d = self.ran(v, "6")
        self.assertEqual(d["forbidden"], [], "the server's reconciler was forbidden after the namespace came back")
        self.assertIsNotNone(d["back_s"], f"created budgets not back within {BUDGETS_BACK_S}s: {d['created']} of {d['expected']}")
        self.assertEqual(ha_problems(d["facts"]), [], "Operator + product after the reinstall")

    def test_7_eventing(self):
        if "alone" in self.variants:
            d = self.ran(self.variant("alone"), "7")
            self.assertFalse(d["done"], "Operator alone: eventing-webhook's 80% budget at 3 replicas blocks the drain")
        d = self.ran(self.variant("product"), "7")
        self.assertEqual(ha_problems(d["facts"]), [], "Operator + product: Eventing after the install")
        self.at_rest(d["rest"], "Eventing after the install")
        self.assertTrue(d["done"] and d["seconds"] < IN_SECONDS, f"the Eventing drain: {d}")

    def test_8_nothing_governed(self):
        d = self.ran(self.variant("product"), "8")
        cond = d["condition"]
        self.assertEqual((cond.get("status"), cond.get("reason")), ("False", "NothingGoverned"),
                         f"a policy that governs nothing: {cond}")
        self.assertTrue(d["left_alone"], "status.leftAlone lists what was left alone")
        self.assertNotEqual(d["audit_rc"], 0, f"audit of a policy that governs nothing: {d['audit'][-500:]}")

    def test_9_admission_metrics(self):
        v = self.variant("product")
        m = v.data.get("metrics")
        self.assertIsNotNone(m, "no admission metrics read")
        outage = v.data["5"].get("fail_open", 0) if "5" not in v.errors else 0
        print(f"\n  admission metrics for the webhook: {m}; fail-opens during the outage scenario: {outage}")
        self.assertEqual(m["rejections"], 0, "the API server rejected writes because of the webhook")
        self.assertEqual(m["fail_open"] - outage, 0, "fail-opens outside the outage scenario")


if __name__ == "__main__":
    unittest.main()
