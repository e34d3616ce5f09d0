"""Knative Eventing (core, in-memory channel, MT channel broker) on the simulated multi-zone cluster
(simcluster.py), as shipped and under the recommended Eventing policy, in the same run.

Two variants, each on its own simulated cluster (6 nodes over 3 zones, fake kubelets; the controller
manager here also runs the statefulset controller, for Eventing's `request-reply`), at once
(KHW_EVENTING_SERIAL=1: one after the other; KHW_EVENTING_VARIANTS picks, default `shipped,policy`):

- `shipped`: Knative Eventing's release files as they are;
- `policy`: the same files as `preview --policy-file examples/policies/knative-eventing.yaml` admits them
  (the budgets the reconciler creates are in `preview`'s output), after examples/priorityclass.yaml.

Knative's own webhook configurations are left out (no process answers them). In order, per variant,
each step sampling every Deployment's (and the StatefulSet's) ready pods twice a second and after every
Eviction the API server accepts:

1. the 1.20 release files applied, then 1.23's (`kubectl apply`): the fewest ready per Deployment
   during the upgrade's rollouts;
2. a drain (`kubectl drain`'s way: cordon, one Eviction per pod, all at once, an Eviction answered 429
   tried again 5 s later, the pods waited for, uncordon) of the node holding the most Eventing pods
   (ties: the one holding an eventing-webhook), done or blocked after DRAIN_S;
3. the HPA-scaled Deployments (eventing-webhook, mt-broker-filter, mt-broker-ingress) scaled out to
   SCALE_OUT through their HPAs' minReplicas, every PodDisruptionBudget and what it selects listed, then
   both nodes of the zone holding the most of their pods drained at once (a zone's maintenance: one node
   holds at most one or two pods of each): how many pods of each were unavailable at once (want - fewest
   ready), when each Eviction was accepted and how many were answered 429; then the HPAs back to the
   install's size;
4. the loss of the zone holding the most Eventing pods, on the placement the drains left (its Nodes
   NotReady and tainted unreachable, their pods deleted, as simcluster.lose_zone does): the fewest ready
   per component.

Every Eviction's answer is kept: a 500 ("more than one PodDisruptionBudget") means two budgets select a
pod. The table prints both variants side by side. The policy variant must: finish both drains, keep every
governed component with a replica above 0 ready at the zone loss, get no Eviction answered 500, and have
every HPA-scaled Deployment with more than one replica selected by exactly one budget that allows at
least one disruption. Knative ships mt-broker-filter and mt-broker-ingress without a budget.

RolloutThenDrain, a drain right after a rollout (the policy's anti-affinity term carries matchLabelKeys
[pod-template-hash], so the previous revision's terminating pods do not count): on clusters whose fake
kubelets make a pod Ready START_S after it is bound and keep a terminating pod TERMINATING_S, Eventing v1.23.0
under the policy, 1/1/1 per zone; ROLLOUT_ROUNDS rounds of `kubectl rollout restart` of mt-broker-filter and
eventing-controller, then a drain of a node holding a new mt-broker-filter pod at the first moment the old
revision's terminating pods are left in one zone only (RolloutDrain.round); then the loss of the fullest zone.
The binary under test must leave every zone with one pod of each after every round and 2 of 3 ready at the
zone loss; `before-synthesized` (its output without matchLabelKeys on the policy's term) and, with
KHW_E2E_BINARY_BEFORE, `before-binary` run beside it for comparison, printed only.

Needs kube-scheduler and kube-controller-manager beside kube-apiserver and etcd in KUBEBUILDER_ASSETS;
one skip line otherwise (the real-cluster mode of test_simcluster is not supported here).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
import traceback
import unittest
from dataclasses import dataclass, field
from pathlib import Path

import yaml

import cluster
import simcluster
from base import binary
from simcluster import LEFT_OUT, ROOT, Monitor, SimCluster

EVENTING = "knative-eventing"
FILES = ("2-eventing-core.yaml", "4-in-memory-channel.yaml", "5-mt-channel-broker.yaml")
RELEASES = {v: [ROOT / "tests" / "fixtures" / f"knative-eventing-v{v}.0" / f for f in FILES] for v in ("1.20", "1.23")}
POLICY = ROOT / "examples" / "policies" / "knative-eventing.yaml"
PRIORITY_CLASS = ROOT / "examples" / "priorityclass.yaml"
VARIANTS = {"shipped": [], "policy": [str(POLICY)]}
CONTROLLERS = simcluster.CONTROLLERS + ",statefulset"
SKIP_LINE = ("Knative Eventing on the simulated cluster: skipped: KUBEBUILDER_ASSETS needs kube-apiserver, etcd, "
             "kube-scheduler and kube-controller-manager (docs/testing.md)")
DRAIN_S = 60  # a drain not done by then is blocked
RETRY_S = 5  # kubectl drain tries an Eviction answered 429 again after 5 s
SCALE_OUT = 5
ROLLOUT_S = 240
FULL_S = 120
# The StatefulSet of eventing-core: no policy governs it (the engine's Knative declaration has Deployments only).
NOT_GOVERNED = ("request-reply",)


def key(name: str) -> str:
    return f"{EVENTING}/{name}"


def short(k: str) -> str:
    return k.split("/", 1)[1]


def selects(selector: dict, labels: dict) -> bool:
    """Whether a label selector (matchLabels, matchExpressions) selects `labels`; an empty one selects all."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        k, op, values = e["key"], e["operator"], e.get("values") or []
        if (op == "In" and labels.get(k) not in values) or (op == "NotIn" and k in labels and labels[k] in values) \
                or (op == "Exists" and k not in labels) or (op == "DoesNotExist" and k in labels):
            return False
    return True


def compact(selector: dict) -> str:
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    parts += [f"{e['key']} {e['operator']} {','.join(e.get('values') or [])}".strip()
              for e in selector.get("matchExpressions") or []]
    return ",".join(parts) or "(everything)"


@dataclass
class Workloads(Monitor):
    """simcluster.Monitor over the Deployments and the StatefulSets of knative-eventing; pods are counted
    by their owner (a ReplicaSet's name less its hash, a StatefulSet's name); `sample` may be called from
    the drain's threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)

    def deployments(self) -> dict[str, dict]:
        out = {}
        for ns in self.namespaces:
            for kind in ("deployments", "statefulsets"):
                for d in self.api.get(f"/apis/apps/v1/namespaces/{ns}/{kind}")["items"]:
                    d["kind"] = kind[:-1]
                    out[f"{ns}/{d['metadata']['name']}"] = d
        return out

    def ready(self) -> dict[str, int]:
        out = {k: 0 for k in self.deployments()}
        for ns in self.namespaces:
            for p in self.api.get(f"/api/v1/namespaces/{ns}/pods")["items"]:
                owner = (p["metadata"].get("ownerReferences") or [{}])[0]
                name = owner.get("name", "")
                k = f"{ns}/{name.rsplit('-', 1)[0] if owner.get('kind') == 'ReplicaSet' else name}"
                conds = {c["type"]: c["status"] for c in p.get("status", {}).get("conditions", [])}
                if (k in out and conds.get("Ready") == "True" and not p["metadata"].get("deletionTimestamp")
                        and p["spec"].get("nodeName") not in self.lost):
                    out[k] += 1
        return out

    def sample(self) -> None:
        with self.lock:
            super().sample()


class EventingSim(SimCluster):
    """A SimCluster for Knative Eventing: its release files, knative-eventing sampled, Workloads. `binary_path`
    runs `preview` (default KHW_E2E_BINARY), `policies` are its policy files (default: the variant's),
    `transform` edits the documents `preview` wrote before they are applied; the rest goes to SimCluster
    (the fake kubelets' `start_s` and `terminating_s`)."""

    def __init__(self, workdir: str, variant: str, binary_path: str | None = None, policies: list[str] | None = None,
                 transform=None, **kw):
        super().__init__(workdir, binary_path or binary(), variant, VARIANTS[variant] if policies is None else policies,
                         controllers=CONTROLLERS, namespaces=(EVENTING,), **kw)
        self.transform = transform

    def start(self) -> "EventingSim":
        super().start()
        self.monitor.stopped = True
        self.monitor = Workloads(self.api, self.lost, namespaces=self.namespaces).start()
        return self

    def manifests(self, release: str) -> str:
        files = [str(f) for f in RELEASES[release]]
        if self.policies:
            args = [a for p in self.policies for a in ("--policy-file", p)]
            r = subprocess.run([self.binary, "preview", *args, "-o", "yaml", *files], capture_output=True, text=True,
                               timeout=120)
            if r.returncode != 0:
                raise AssertionError(f"preview failed: {r.stderr}")
            text = r.stdout
        else:
            text = "\n---\n".join(Path(f).read_text() for f in files)
        docs = [d for d in yaml.safe_load_all(text) if d and d.get("kind") not in LEFT_OUT]
        return yaml.safe_dump_all(self.transform(docs) if self.transform else docs)

    def rollout(self, limit_s: float) -> dict[str, bool]:
        """`kubectl rollout status` of every Deployment and StatefulSet, within one deadline."""
        deadline = time.monotonic() + limit_s
        done = {}
        for k, d in sorted(self.monitor.deployments().items()):
            left = max(1, int(deadline - time.monotonic()))
            r = self.kubectl.run("-n", EVENTING, "rollout", "status", f"{d['kind']}/{short(k)}", f"--timeout={left}s",
                                 check=False, timeout=left + 30)
            done[k] = r.returncode == 0
        return done

    # -- what runs where ---------------------------------------------------------------------------
    def running(self) -> list[dict]:
        """The Eventing pods not terminating on a live node."""
        return [p for p in self.pods() if p["spec"].get("nodeName") in self.nodes and p["spec"]["nodeName"] not in self.lost
                and not p["metadata"].get("deletionTimestamp")]

    def component_of(self, pod: dict) -> str:
        owner = (pod["metadata"].get("ownerReferences") or [{}])[0]
        name = owner.get("name", "?")
        return name.rsplit("-", 1)[0] if owner.get("kind") == "ReplicaSet" else name

    def busiest_node(self) -> tuple[str, int]:
        """The node holding the most Eventing pods (ties: one holding an eventing-webhook, then by name)."""
        count: dict[str, int] = {}
        webhook: set[str] = set()
        for p in self.running():
            count[p["spec"]["nodeName"]] = count.get(p["spec"]["nodeName"], 0) + 1
            if self.component_of(p) == "eventing-webhook":
                webhook.add(p["spec"]["nodeName"])
        node = sorted(count, key=lambda n: (-count[n], n not in webhook, n))[0]
        return node, count[node]

    def busiest_zone(self, components: tuple[str, ...] | None = None) -> tuple[str, int]:
        """The zone holding the most Eventing pods (of `components`, when given); ties by name."""
        count = {z: 0 for z in self.zones}
        for p in self.running():
            if components is None or self.component_of(p) in components:
                count[self.nodes[p["spec"]["nodeName"]]] += 1
        zone = sorted(count, key=lambda z: (-count[z], z))[0]
        return zone, count[zone]

    def placement(self) -> str:
        by: dict[str, list[int]] = {}
        for p in self.running():
            c = self.component_of(p)
            by.setdefault(c, [0] * len(self.zones))[self.zones.index(self.nodes[p["spec"]["nodeName"]])] += 1
        return ", ".join(f"{c} {'/'.join(map(str, z))}" for c, z in sorted(by.items()))

    # -- drains ------------------------------------------------------------------------------------
    def evict_drain(self, nodes: list[str], limit_s: float = DRAIN_S) -> dict:
        """`kubectl drain` of `nodes` at once: cordoned, one Eviction per pod on them (DaemonSets' aside),
        all at once, 429 tried again every RETRY_S, the evicted pods waited for, uncordoned. What every
        Eviction was answered, whether all pods went within `limit_s`."""
        t0 = time.monotonic()
        deadline = t0 + limit_s
        for n in nodes:
            self.api.merge(f"/api/v1/nodes/{n}", {"spec": {"unschedulable": True}})
        pods = [p for p in self.api.get("/api/v1/pods")["items"] if p["spec"].get("nodeName") in nodes
                and not p["metadata"].get("deletionTimestamp")
                and not any(o.get("kind") == "DaemonSet" for o in p["metadata"].get("ownerReferences") or [])]
        lock = threading.Lock()
        # per component: when each Eviction was accepted (seconds into the drain), how many were answered 429
        out = {"nodes": nodes, "pods": len(pods), "accepted": 0, "refused": 0, "errors": [], "left": [],
               "evicted_at": {}, "refused_by": {}}

        def count(field: str, c: str) -> None:
            out[field][c] = out[field].get(c, 0) + 1

        def evict(p: dict) -> None:
            ns, name, uid = p["metadata"]["namespace"], p["metadata"]["name"], p["metadata"]["uid"]
            path = f"/api/v1/namespaces/{ns}/pods/{name}"
            body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns},
                    "deleteOptions": {"preconditions": {"uid": uid}}}
            c = self.component_of(p)
            while time.monotonic() < deadline:
                try:
                    self.api.call("POST", f"{path}/eviction", body)
                except AssertionError as e:
                    text = str(e)
                    if "HTTP 429" in text:
                        with lock:
                            out["refused"] += 1
                            count("refused_by", c)
                        time.sleep(RETRY_S)
                        continue
                    if "HTTP 404" in text or "HTTP 409" in text:  # gone, or replaced under the same name
                        break
                    with lock:  # kubectl drain gives up on this pod (and fails) on any other answer
                        out["errors"].append(f"{name}: {text[:300]}")
                    return
                with lock:
                    out["accepted"] += 1
                    out["evicted_at"].setdefault(c, []).append(round(time.monotonic() - t0, 1))
                try:
                    self.monitor.sample()
                except (AssertionError, OSError):
                    pass
                break
            else:
                return

            def gone() -> bool:
                try:
                    cur = self.api.get(path)
                except AssertionError as e:
                    return "HTTP 404" in str(e)
                return cur["metadata"]["uid"] != uid

            cluster.wait_for_bool(gone, max(0.5, deadline - time.monotonic()), 0.25)

        threads = [threading.Thread(target=evict, args=(p,), daemon=True) for p in pods]
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(0.1, deadline - time.monotonic()) + 25)
        on_node = [p["metadata"]["name"] for p in self.api.get("/api/v1/pods")["items"]
                   if p["spec"].get("nodeName") in nodes and p["metadata"]["uid"] in {q["metadata"]["uid"] for q in pods}]
        out["left"] = on_node
        out["seconds"] = time.monotonic() - t0
        out["done"] = not on_node and not out["errors"]
        for n in nodes:
            self.api.merge(f"/api/v1/nodes/{n}", {"spec": {"unschedulable": None}})
        return out

    # -- HPAs and budgets --------------------------------------------------------------------------
    def hpas(self) -> dict[str, dict]:
        """The HPAs by the Deployment they scale."""
        return {h["spec"]["scaleTargetRef"]["name"]: h
                for h in self.api.get(f"/apis/autoscaling/v2/namespaces/{EVENTING}/horizontalpodautoscalers")["items"]}

    def set_hpa(self, hpa: str, minimum: int, maximum: int) -> None:
        self.api.merge(f"/apis/autoscaling/v2/namespaces/{EVENTING}/horizontalpodautoscalers/{hpa}",
                       {"spec": {"minReplicas": minimum, "maxReplicas": maximum}})

    def at(self, deployment: str, replicas: int) -> bool:
        d = self.api.get(f"/apis/apps/v1/namespaces/{EVENTING}/deployments/{deployment}")
        return d["spec"].get("replicas") == replicas and self.monitor.ready().get(key(deployment), 0) == replicas

    def budgets(self) -> list[dict]:
        return self.api.get(f"/apis/policy/v1/namespaces/{EVENTING}/poddisruptionbudgets")["items"]

    def coverage(self, deployments: list[str], limit_s: float = 30) -> tuple[dict[str, list[dict]], list[str]]:
        """Per Deployment, the budgets whose selector selects its pod template's labels, each with what
        the disruption controller allows now (waited for until it counts every pod it selects), and one
        line per budget."""
        def settled() -> list[dict] | None:
            pods = [p for p in self.pods() if not p["metadata"].get("deletionTimestamp")]
            out = self.budgets()
            for b in out:
                st = b.get("status") or {}
                n = sum(selects(b["spec"].get("selector") or {}, p["metadata"].get("labels") or {}) for p in pods)
                if st.get("observedGeneration") != b["metadata"]["generation"] or st.get("expectedPods") != n:
                    return None
            return out

        try:
            budgets = cluster.wait_for(settled, "the budgets' status", limit_s, 1)
        except AssertionError:
            budgets = self.budgets()
        templates = {d: self.api.get(f"/apis/apps/v1/namespaces/{EVENTING}/deployments/{d}")["spec"]["template"]
                     for d in deployments}
        cover = {}
        for d, tpl in templates.items():
            labels = tpl["metadata"].get("labels") or {}
            cover[d] = [{"name": b["metadata"]["name"], "allowed": (b.get("status") or {}).get("disruptionsAllowed", 0)}
                        for b in budgets if selects(b["spec"].get("selector") or {}, labels)]
        lines = []
        for b in budgets:
            spec, st = b["spec"], b.get("status") or {}
            field = next(f"{f}: {spec[f]}" for f in ("minAvailable", "maxUnavailable") if f in spec)
            lines.append(f"{b['metadata']['name']} [{compact(spec.get('selector') or {})}] {field}: "
                         f"allows {st.get('disruptionsAllowed', 0)} of {st.get('expectedPods', 0)}")
        return cover, lines


def drain_text(d: dict) -> str:
    if d["done"]:
        return f"done in {d['seconds']:.1f}s"
    why = f"{len(d['errors'])} Evictions answered an error" if d["errors"] else f"{len(d['left'])} pods left"
    return f"BLOCKED after {d['seconds']:.0f}s ({why})"


def settle(sim: EventingSim) -> bool:
    """Every HPA's Deployment at its minReplicas at least, then every workload at its full count (a
    release's apply leaves an HPA-scaled Deployment at 1 until its HPA acts)."""
    def scaled() -> bool:
        for d, h in sim.hpas().items():
            dep = sim.api.get(f"/apis/apps/v1/namespaces/{EVENTING}/deployments/{d}")
            if dep["spec"].get("replicas", 1) < h["spec"].get("minReplicas", 1):
                return False
        return True

    return cluster.wait_for_bool(scaled, FULL_S) and sim.wait_full(FULL_S)


class Variant:
    """One variant run through the four scenarios on its own cluster: table rows and data for the tests."""

    def __init__(self, name: str, workdir: str):
        self.name = name
        self.workdir = workdir
        self.data: dict = {}
        self.error: str | None = None
        self.took = 0.0

    def say(self, text: str) -> None:
        print(f"  [{self.name}] {text}", flush=True)

    def step(self, sim: EventingSim, name: str, action) -> dict:
        """Runs `action()` while sampling; per component: want, fewest ready, ready at the end."""
        sim.monitor.minimum = {}
        sim.monitor.active = True
        t = time.monotonic()
        try:
            note = action()
        finally:
            seconds = time.monotonic() - t
            sim.monitor.sample()
            sim.monitor.active = False
        objects = sim.monitor.deployments()
        ready = sim.monitor.ready()
        rows = {}
        for k, d in sorted(objects.items()):
            want = d["spec"].get("replicas", 1)
            rows[short(k)] = {"want": want, "min": min(sim.monitor.minimum.get(k, 0), ready[k]), "end": ready[k]}
        self.say(f"{name} ({seconds:.1f}s): " + ", ".join(f"{c} {r['min']}/{r['want']}" for c, r in rows.items())
                 + (f"; {note}" if isinstance(note, str) else ""))
        return {"rows": rows, "seconds": seconds, "note": note}

    def run(self) -> None:
        t0 = time.monotonic()
        sim = EventingSim(self.workdir, self.name)
        try:
            sim.start()
            self.say(f"API server {sim.plane.server}; work dir {self.workdir}")
            if sim.policies:
                sim.kubectl.apply(str(PRIORITY_CLASS))

            # 1 install 1.20, upgrade to 1.23
            def install():
                sim.apply_release("1.20")
                return sim.rollout(ROLLOUT_S)

            self.data["install"] = self.step(sim, "install 1.20", install)
            self.say(f"settled (every HPA at its minReplicas, every workload at its count): {settle(sim)}")
            self.say(f"placement (pods per zone {sim.zone_names()}): {sim.placement()}")

            def upgrade():
                sim.apply_release("1.23")
                return sim.rollout(ROLLOUT_S)

            self.data["upgrade"] = self.step(sim, "upgrade to 1.23", upgrade)
            self.say(f"settled: {settle(sim)}")

            # 2 drain of the busiest node
            node, count = sim.busiest_node()
            self.data["drain_target"] = f"{node} ({sim.nodes[node]}, {count} pods)"
            drain = self.step(sim, f"drain {node}", lambda: sim.evict_drain([node]))
            drain["drain"] = drain["note"]
            self.data["drain"] = drain
            self.say(f"drain of {node}: {drain_text(drain['drain'])}; {drain['drain']}")
            sim.wait_full(FULL_S)

            # 3 scale-out of the HPA-scaled Deployments, budgets, a zone's drain
            hpas = sim.hpas()
            self.data["hpa_scaled"] = sorted(hpas)
            before = {d: (h["spec"].get("minReplicas", 1), h["spec"]["maxReplicas"]) for d, h in hpas.items()}

            def scale_out():
                for d, h in hpas.items():
                    sim.set_hpa(h["metadata"]["name"], SCALE_OUT, max(before[d][1], SCALE_OUT))
                ok = cluster.wait_for_bool(lambda: all(sim.at(d, SCALE_OUT) for d in hpas), FULL_S)
                return "all at " + str(SCALE_OUT) if ok else f"NOT all at {SCALE_OUT} ready in {FULL_S}s"

            self.data["scale_out"] = self.step(sim, f"HPA scale-out to {SCALE_OUT}", scale_out)
            cover, lines = sim.coverage(sorted(hpas))
            replicas = {d: sim.api.get(f"/apis/apps/v1/namespaces/{EVENTING}/deployments/{d}")["spec"].get("replicas", 1)
                        for d in hpas}
            self.data["coverage"] = cover
            self.data["replicas"] = replicas
            self.data["budgets"] = lines
            for ln in lines:
                self.say(f"PDB {ln}")
            zone, count = sim.busiest_zone(tuple(hpas))
            zone_nodes = sorted(n for n, z in sim.nodes.items() if z == zone)
            self.data["zone_drain_target"] = f"{zone} ({', '.join(zone_nodes)}; {count} pods of {', '.join(sorted(hpas))})"
            self.say(f"placement before the zone's drain: {sim.placement()}")
            zdrain = self.step(sim, f"drain {zone} ({' + '.join(zone_nodes)})", lambda: sim.evict_drain(zone_nodes))
            zdrain["drain"] = zdrain["note"]
            self.data["zone_drain"] = zdrain
            self.say(f"drain of {zone}: {drain_text(zdrain['drain'])}; {zdrain['drain']}")
            sim.wait_full(FULL_S)
            # back to the install's size: an HPA without metrics keeps its replicas within its range, so
            # the range is narrowed to the old minimum first
            for d, h in hpas.items():
                sim.set_hpa(h["metadata"]["name"], before[d][0], before[d][0])
            back = cluster.wait_for_bool(lambda: all(sim.at(d, before[d][0]) for d in hpas), FULL_S)
            for d, h in hpas.items():
                sim.set_hpa(h["metadata"]["name"], before[d][0], before[d][1])
            self.say(f"HPAs back to {before}: {'done' if back else 'NOT done'}")

            # 4 zone loss, on the placement the drains left
            sim.wait_full(FULL_S)
            zone, count = sim.busiest_zone()
            self.data["zone_loss_target"] = f"{zone} ({count} pods)"
            self.say(f"placement before the zone loss (pods per zone {sim.zone_names()}): {sim.placement()}")

            def zone_loss():
                sim.lose_zone(zone)
                return "back to full count" if sim.wait_full(FULL_S) else f"NOT back to full count in {FULL_S}s"

            self.data["zone_loss"] = self.step(sim, f"zone loss ({zone})", zone_loss)
            self.data["errors"] = len(sim.kubelets.errors) if sim.kubelets else 0
        except Exception:  # noqa: BLE001 - recorded, failed by the tests
            self.error = traceback.format_exc()
            self.say(f"raised:\n{self.error}")
        finally:
            if sim.kubelets is not None:
                self.say(f"fake kubelet errors: {len(sim.kubelets.errors)}")
            sim.stop()
            self.took = time.monotonic() - t0
            self.say(f"took {self.took:.0f}s")


# -- the facts the table and the tests read ------------------------------------------------------------
def governed_rows(rows: dict) -> dict:
    """The components a policy governs with a replica to keep (want > 0: pingsource-mt-adapter is scaled
    0 <-> 1 by Eventing itself; the StatefulSet request-reply is not governed)."""
    return {c: r for c, r in rows.items() if c not in NOT_GOVERNED and r["want"] > 0}


def at_zero(step: dict) -> list[str]:
    return sorted(c for c, r in governed_rows(step["rows"]).items() if r["min"] == 0)


def evictions_500(v: Variant) -> list[str]:
    return [e for s in ("drain", "zone_drain") if s in v.data for e in v.data[s]["drain"]["errors"] if "HTTP 500" in e]


def max_unavailable(step: dict, component: str) -> int:
    r = step["rows"].get(component)
    return r["want"] - r["min"] if r else 0


def evicted_at(drain: dict, component: str) -> str:
    return "+".join(map(str, sorted(drain["evicted_at"].get(component, [])))) or "none"


def coverage_problems(v: Variant) -> list[str]:
    """HPA-scaled Deployments with more than one replica not selected by exactly one budget allowing >= 1."""
    out = []
    for d, budgets in sorted(v.data["coverage"].items()):
        if v.data["replicas"][d] <= 1:
            continue
        if len(budgets) != 1:
            out.append(f"{d}: {len(budgets)} budgets select it ({', '.join(b['name'] for b in budgets) or 'none'})")
        elif budgets[0]["allowed"] < 1:
            out.append(f"{d}: its budget {budgets[0]['name']} allows {budgets[0]['allowed']} disruptions")
    return out


def table(variants: dict[str, Variant]) -> str:
    names = list(variants)
    rows: list[tuple[str, list[str]]] = []

    def add(label: str, f) -> None:
        vals = []
        for n in names:
            v = variants[n]
            try:
                vals.append(str(f(v)))
            except (KeyError, TypeError, StopIteration):
                vals.append("-" if v.error is None else "(not run)")
        rows.append((label, vals))

    def components(step: str) -> list[str]:
        return sorted({c for v in variants.values() if step in v.data for c in v.data[step]["rows"]})

    def label(c: str) -> str:
        return c + (" (StatefulSet, not governed)" if c in NOT_GOVERNED else "")

    def ready(step: str, c: str):
        return lambda v: f"{v.data[step]['rows'][c]['min']} of {v.data[step]['rows'][c]['want']}"

    add("upgrade 1.20 -> 1.23: fewest ready (of want)", lambda v: "rolled out" if all(v.data["upgrade"]["note"].values())
        else "NOT rolled out: " + ", ".join(short(k) for k, ok in v.data["upgrade"]["note"].items() if not ok))
    for c in components("upgrade"):
        add(f"  {label(c)}", ready("upgrade", c))
    add("drain of the busiest node", lambda v: v.data["drain_target"])
    add("  outcome", lambda v: drain_text(v.data["drain"]["drain"]))
    add("  Evictions accepted / answered 429", lambda v: f"{v.data['drain']['drain']['accepted']} / {v.data['drain']['drain']['refused']}")
    for c in components("drain"):
        add(f"  {label(c)}", ready("drain", c))
    add(f"HPA scale-out to {SCALE_OUT}", lambda v: v.data["scale_out"]["note"])
    add("PDBs (selector, budget, allows of pods)", lambda v: len(v.data["budgets"]))
    for i in range(max((len(v.data.get("budgets", [])) for v in variants.values()), default=0)):
        add(f"  PDB {i + 1}", lambda v, i=i: v.data["budgets"][i] if i < len(v.data["budgets"]) else "")
    for d in sorted({d for v in variants.values() for d in v.data.get("hpa_scaled", [])}):
        add(f"  {d} ({SCALE_OUT} replicas) selected by",
            lambda v, d=d: ", ".join(f"{b['name']} (allows {b['allowed']})" for b in v.data["coverage"][d]) or "NO PDB")
    add("drain of a zone after the scale-out", lambda v: v.data["zone_drain_target"])
    add("  outcome", lambda v: drain_text(v.data["zone_drain"]["drain"]))
    add("  Evictions accepted / answered 429", lambda v: f"{v.data['zone_drain']['drain']['accepted']} / {v.data['zone_drain']['drain']['refused']}")
    for d in sorted({d for v in variants.values() for d in v.data.get("hpa_scaled", [])}):
        add(f"  {d}: max unavailable; evicted at s; 429s",
            lambda v, d=d: f"{max_unavailable(v.data['zone_drain'], d)} of {v.data['zone_drain']['rows'][d]['want']}; "
                           f"{evicted_at(v.data['zone_drain']['drain'], d)}; "
                           f"{v.data['zone_drain']['drain']['refused_by'].get(d, 0)}")
    add("Evictions answered 500 (both drains)", lambda v: len(evictions_500(v)))
    add("zone loss", lambda v: f"{v.data['zone_loss_target']}: {v.data['zone_loss']['note']}")
    for c in components("zone_loss"):
        add(f"  {label(c)}", ready("zone_loss", c))
    add("  components at 0 ready", lambda v: f"{len(at_zero(v.data['zone_loss']))}: {', '.join(at_zero(v.data['zone_loss'])) or '-'}")
    add("variant wall time", lambda v: f"{v.took:.0f}s")

    width = max(len(r[0]) for r in rows) + 2
    cols = [max([len(n)] + [len(r[1][i]) for r in rows]) + 2 for i, n in enumerate(names)]
    out = [f"{'':<{width}}" + "".join(f"{n:<{cols[i]}}" for i, n in enumerate(names))]
    for label, vals in rows:
        out.append(f"{label:<{width}}" + "".join(f"{val:<{cols[i]}}" for i, val in enumerate(vals)))
    return "\n".join(out)


def setUpModule():
    if not simcluster.assets_ready():  # one skip line for the module's scenarios
        raise unittest.SkipTest(SKIP_LINE)


class EventingScenarios(unittest.TestCase):
    variants: dict[str, Variant] = {}

    @classmethod
    def setUpClass(cls):
        names = [v.strip() for v in os.environ.get("KHW_EVENTING_VARIANTS", "shipped,policy").split(",") if v.strip()]
        unknown = [n for n in names if n not in VARIANTS]
        if unknown:
            raise AssertionError(f"KHW_EVENTING_VARIANTS: unknown {unknown} (known: {', '.join(VARIANTS)})")
        parent = os.environ.get("KHW_E2E_WORKDIR") or None
        root = tempfile.mkdtemp(prefix="test_eventing-", dir=parent)
        cls.variants = {n: Variant(n, tempfile.mkdtemp(prefix=f"{n}-", dir=root)) for n in names}
        serial = os.environ.get("KHW_EVENTING_SERIAL") == "1"
        print(f"\n== Knative Eventing on the simulated cluster: {', '.join(names)} "
              f"({'one after the other' if serial else 'at once'}); work dir {root}", flush=True)
        t = time.monotonic()
        if serial:
            for v in cls.variants.values():
                v.run()
        else:
            threads = [threading.Thread(target=v.run, name=f"eventing-{n}") for n, v in cls.variants.items()]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
        print(f"\n== Knative Eventing: shipped against {POLICY.relative_to(ROOT)} ({time.monotonic() - t:.0f}s)\n"
              + table(cls.variants), flush=True)

    def variant(self, name: str) -> Variant:
        if name not in self.variants:
            self.skipTest(f"variant {name} not run (KHW_EVENTING_VARIANTS)")
        v = self.variants[name]
        if v.error:
            self.fail(f"{name}: the run raised:\n{v.error}")
        return v

    def test_shipped_zone_loss_bites(self):
        """Knative as shipped runs one replica of each component: the lost zone takes some to 0 (the
        scenario shows what the policy is for)."""
        v = self.variant("shipped")
        self.assertGreaterEqual(len(at_zero(v.data["zone_loss"])), 1, v.data["zone_loss"])

    def test_policy_rollouts_done(self):
        v = self.variant("policy")
        for s in ("install", "upgrade"):
            self.assertTrue(all(v.data[s]["note"].values()), f"{s}: {v.data[s]['note']}")

    def test_policy_drains_finish(self):
        v = self.variant("policy")
        for s in ("drain", "zone_drain"):
            d = v.data[s]["drain"]
            self.assertTrue(d["done"], f"{s}: {drain_text(d)}: {d}")

    def test_policy_no_component_at_zero_at_zone_loss(self):
        v = self.variant("policy")
        self.assertEqual(at_zero(v.data["zone_loss"]), [], f"zone loss: {v.data['zone_loss']['rows']}")

    def test_policy_no_eviction_500(self):
        v = self.variant("policy")
        self.assertEqual(evictions_500(v), [], "Evictions answered 500: two budgets select one pod")

    def test_policy_hpa_scaled_deployments_have_one_budget(self):
        v = self.variant("policy")
        self.assertEqual(coverage_problems(v), [],
                         "every HPA-scaled Deployment with more than one replica: exactly one budget allowing >= 1")



# -- a drain right after a rollout: the policy's anti-affinity term and the old revision's pods ----------
RESTARTED = ("mt-broker-filter", "eventing-controller")
DRAINED_FOR = "mt-broker-filter"  # the drained node holds one of its new pods
ROLLOUT_ROUNDS = int(os.environ.get("KHW_ROLLOUT_ROUNDS", "3"))
START_S = 2.0  # the fake kubelets make a bound pod Ready this long after they see it: a rollout's steps apart
TERMINATING_S = 10.0  # and keep a terminating pod this long (Knative's pods shut down gracefully; default grace 30 s)
TEMPLATE_HASH = "pod-template-hash"
MARK = "knativeha.dev/anti-affinity"  # the matchExpressions key that marks the policy's own anti-affinity term
ROLLOUT_VARIANTS = ("under-test", "before-binary", "before-synthesized")


def anti_affinity_terms(deployment: dict) -> list[dict]:
    anti = (deployment["spec"]["template"]["spec"].get("affinity") or {}).get("podAntiAffinity") or {}
    return ([t.get("podAffinityTerm", t) for t in anti.get("preferredDuringSchedulingIgnoredDuringExecution") or []]
            + list(anti.get("requiredDuringSchedulingIgnoredDuringExecution") or []))


def policy_term(term: dict) -> bool:
    return any(e.get("key") == MARK for e in (term.get("labelSelector") or {}).get("matchExpressions") or [])


def without_match_label_keys(docs: list[dict]) -> list[dict]:
    """The policy's anti-affinity term (marked by its `knativeha.dev/anti-affinity DoesNotExist` expression)
    without `matchLabelKeys`: what the engine wrote before the term carried `[pod-template-hash]`."""
    for d in docs:
        if d.get("kind") == "Deployment":
            for t in anti_affinity_terms(d):
                if policy_term(t):
                    t.pop("matchLabelKeys", None)
    return docs


def terms_note(deployment: dict) -> str:
    return "; ".join(f"{'policy' if policy_term(t) else 'release'} term on {t.get('topologyKey')}, matchLabelKeys "
                     f"{t.get('matchLabelKeys') or 'none'}" for t in anti_affinity_terms(deployment)) or "none"


def zones_text(counts: list[int]) -> str:
    return "/".join(map(str, counts))


class RolloutDrain:
    """One run of the rollout-then-drain rounds on its own simulated cluster (fake kubelets with START_S and
    TERMINATING_S), Knative Eventing v1.23.0 as `preview` of `binary_path` admits it under
    examples/policies/knative-eventing.yaml (then `transform`, if any)."""

    def __init__(self, name: str, workdir: str, binary_path: str, transform=None):
        self.name, self.workdir, self.binary, self.transform = name, workdir, binary_path, transform
        self.data: dict = {"rounds": []}
        self.error: str | None = None
        self.took = 0.0

    def say(self, text: str) -> None:
        print(f"  [{self.name}] {text}", flush=True)

    # -- what runs where ---------------------------------------------------------------------------
    @staticmethod
    def of(sim: EventingSim, pods: list[dict], deployment: str) -> list[dict]:
        return [p for p in pods if sim.component_of(p) == deployment]

    @staticmethod
    def placed(sim: EventingSim, pods: list[dict]) -> list[int]:
        """Per zone (sim.zones' order), the pods not terminating on a live node."""
        out = [0] * len(sim.zones)
        for p in pods:
            node = p["spec"].get("nodeName")
            if node in sim.nodes and node not in sim.lost and not p["metadata"].get("deletionTimestamp"):
                out[sim.zones.index(sim.nodes[node])] += 1
        return out

    def placement(self, sim: EventingSim) -> dict[str, list[int]]:
        pods = sim.pods()
        return {d: self.placed(sim, self.of(sim, pods, d)) for d in RESTARTED}

    def want(self, sim: EventingSim) -> dict[str, int]:
        return {d: sim.api.get(f"/apis/apps/v1/namespaces/{EVENTING}/deployments/{d}")["spec"].get("replicas", 1)
                for d in RESTARTED}

    def budgets_allow(self, sim: EventingSim, deployment: str) -> bool:
        tpl = sim.api.get(f"/apis/apps/v1/namespaces/{EVENTING}/deployments/{deployment}")["spec"]["template"]
        labels = tpl["metadata"].get("labels") or {}
        return all((b.get("status") or {}).get("disruptionsAllowed", 0) >= 1 for b in sim.budgets()
                   if selects(b["spec"].get("selector") or {}, labels))

    # -- the run -----------------------------------------------------------------------------------
    def run(self) -> None:
        t0 = time.monotonic()
        sim = EventingSim(self.workdir, "policy", binary_path=self.binary, policies=[str(POLICY)],
                          transform=self.transform, start_s=START_S, terminating_s=TERMINATING_S)
        sim.variant = self.name
        try:
            sim.start()
            self.say(f"API server {sim.plane.server}; work dir {self.workdir}; preview by {self.binary}"
                     + (" with matchLabelKeys taken off the policy's anti-affinity term" if self.transform else ""))
            sim.kubectl.apply(str(PRIORITY_CLASS))
            sim.apply_release("1.23")
            done = sim.rollout(ROLLOUT_S)
            settled = settle(sim)
            spread = cluster.wait_for_bool(lambda: all(c == [1, 1, 1] for c in self.placement(sim).values()), FULL_S)
            deployments = {d: sim.api.get(f"/apis/apps/v1/namespaces/{EVENTING}/deployments/{d}") for d in RESTARTED}
            self.data["terms"] = {d: terms_note(dep) for d, dep in deployments.items()}
            self.data["install"] = {"rolled": all(done.values()), "settled": settled, "spread": spread,
                                    "placement": self.placement(sim), "seconds": time.monotonic() - t0}
            self.say(f"installed in {self.data['install']['seconds']:.0f}s: rolled out {all(done.values())}, settled "
                     f"{settled}; per zone {sim.zone_names()}: "
                     + ", ".join(f"{d} {zones_text(c)}" for d, c in self.data["install"]["placement"].items()))
            for d, note in self.data["terms"].items():
                self.say(f"{d} anti-affinity: {note}")
            for n in range(1, ROLLOUT_ROUNDS + 1):
                self.data["rounds"].append(self.round(sim, n))
            self.data["zone_loss"] = self.zone_loss(sim)
            self.data["kubelet_errors"] = len(sim.kubelets.errors) if sim.kubelets else 0
        except Exception:  # noqa: BLE001 - recorded, failed by the tests
            self.error = traceback.format_exc()
            self.say(f"raised:\n{self.error}")
        finally:
            sim.stop()
            self.took = time.monotonic() - t0
            self.say(f"took {self.took:.0f}s")

    def round(self, sim: EventingSim, n: int) -> dict:
        """`kubectl rollout restart` of RESTARTED, then a drain of a node holding a new DRAINED_FOR pod at the
        first moment after the rollout when the old revision's terminating pods of DRAINED_FOR are left in
        one zone only and its budgets allow a disruption: a node of that zone, preferably one whose zone's
        other node holds the old pod (the defect's setting: that pod still counted by an anti-affinity term
        without matchLabelKeys, the other zones' old pods gone, so anti-affinity pulls the replacement away
        from the zone the spread constraint sends it to). The placement once the replacements run."""
        out: dict = {"round": n}
        want = self.want(sim)
        out["before"] = self.placement(sim)
        t0 = time.monotonic()
        sim.kubectl.run("-n", EVENTING, "rollout", "restart", *(f"deployment/{d}" for d in RESTARTED))
        done = {}
        for d in RESTARTED:
            r = sim.kubectl.run("-n", EVENTING, "rollout", "status", f"deployment/{d}", f"--timeout={ROLLOUT_S}s",
                                check=False, timeout=ROLLOUT_S + 30)
            done[d] = r.returncode == 0
        out["rolled"] = all(done.values())
        out["rollout_s"] = time.monotonic() - t0
        rolled_at = time.monotonic()
        pods = sim.pods()
        new_hash = {}
        for d in RESTARTED:
            live = [p for p in self.of(sim, pods, d) if not p["metadata"].get("deletionTimestamp")]
            new_hash[d] = {(p["metadata"].get("labels") or {}).get(TEMPLATE_HASH) for p in live}
        out["new_hash"] = {d: sorted(h) for d, h in new_hash.items()}

        def lingering(pods: list[dict], d: str) -> list[str]:
            """Nodes holding a terminating pod of d's previous revisions."""
            return sorted(p["spec"]["nodeName"] for p in self.of(sim, pods, d)
                          if p["metadata"].get("deletionTimestamp") and p["spec"].get("nodeName") in sim.nodes
                          and (p["metadata"].get("labels") or {}).get(TEMPLATE_HASH) not in new_hash[d])

        def new_nodes(pods: list[dict], d: str) -> list[str]:
            return sorted(p["spec"]["nodeName"] for p in self.of(sim, pods, d)
                          if not p["metadata"].get("deletionTimestamp") and p["spec"].get("nodeName") in sim.nodes)

        target, condition, seen_lingering = None, None, []
        deadline = time.monotonic() + TERMINATING_S + 5
        while time.monotonic() < deadline:
            pods = sim.pods()
            old = lingering(pods, DRAINED_FOR)
            seen_lingering.append(old)
            zones = {sim.nodes[m] for m in old}
            candidates = [m for m in new_nodes(pods, DRAINED_FOR) if sim.nodes[m] in zones]
            if candidates and len(zones) == 1 and self.budgets_allow(sim, DRAINED_FOR):
                others = set(new_nodes(pods, "eventing-controller"))
                # first a node whose zone's other node holds the old pod (the replacement's choice: that node
                # or another zone), then one holding an eventing-controller pod too
                target = sorted(candidates, key=lambda m: (m in old, m not in others, m))[0]
                condition = ("old pods left terminating in one zone only, on "
                             + ("the drained node" if target in old else "the zone's other node"))
                break
            if not old:
                break
            time.sleep(0.2)
        pods = sim.pods()
        if target is None:  # never in the defect's setting: a drain right away of any node with a new pod
            target = new_nodes(pods, DRAINED_FOR)[0]
            condition = "no moment with old pods left in one zone only"
        out["condition"] = condition
        out["drain_at_s"] = time.monotonic() - rolled_at
        out["lingering"] = {d: lingering(pods, d) for d in RESTARTED}
        out["target"] = f"{target} ({sim.nodes[target]})"
        out["target_holds"] = sorted({sim.component_of(p) for p in pods if p["spec"].get("nodeName") == target
                                      and not p["metadata"].get("deletionTimestamp")} & set(RESTARTED))
        before_uids = {p["metadata"]["uid"] for p in pods}
        drain = sim.evict_drain([target])
        out["drain"] = drain_text(drain)
        out["drain_done"] = drain["done"]

        def all_ready() -> bool:
            ready = sim.monitor.ready()
            return all(ready.get(key(d), 0) >= want[d] for d in RESTARTED)

        out["replaced"] = cluster.wait_for_bool(all_ready, FULL_S)
        pods = sim.pods()
        out["after"] = {d: self.placed(sim, self.of(sim, pods, d)) for d in RESTARTED}
        out["replacements"] = {d: [f"{p['spec'].get('nodeName')} ({sim.nodes.get(p['spec'].get('nodeName'), '?')})"
                                   for p in self.of(sim, pods, d) if p["metadata"]["uid"] not in before_uids
                                   and not p["metadata"].get("deletionTimestamp")] for d in RESTARTED}
        out["zone_loss_leaves"] = {d: want[d] - max(c) for d, c in out["after"].items()}
        out["want"] = want
        # the next round starts without terminating pods
        out["cleared"] = cluster.wait_for_bool(
            lambda: not any(p["metadata"].get("deletionTimestamp") for p in sim.pods()), TERMINATING_S + 30)
        self.say(f"round {n}: rollout {'done' if out['rolled'] else 'NOT done'} in {out['rollout_s']:.1f}s; drain of "
                 f"{out['target']} (holding {', '.join(out['target_holds']) or 'none of them'}) "
                 f"{out['drain_at_s']:.1f}s after it, {condition}; old {DRAINED_FOR} pods terminating on "
                 f"{', '.join(out['lingering'][DRAINED_FOR]) or 'none'} (polled: "
                 f"{' | '.join(','.join(x) or '-' for x in seen_lingering[-4:])}); {out['drain']}; replacements "
                 + "; ".join(f"{d} {', '.join(r) or 'none'}" for d, r in out["replacements"].items())
                 + f"; per zone {sim.zone_names()} " + ", ".join(f"{d} {zones_text(c)}" for d, c in out["after"].items()))
        return out

    def zone_loss(self, sim: EventingSim) -> dict:
        """The loss of the zone holding the most pods of RESTARTED (ties: the most of DRAINED_FOR): the ready
        pods of each right after (its pods deleted, replacements not yet Ready: START_S)."""
        placement = self.placement(sim)
        zone = sorted(sim.zones, key=lambda z: (-sum(c[sim.zones.index(z)] for c in placement.values()),
                                                -placement[DRAINED_FOR][sim.zones.index(z)], z))[0]
        want = self.want(sim)
        sim.lose_zone(zone)
        ready = sim.monitor.ready()
        left = {d: ready.get(key(d), 0) for d in RESTARTED}
        back = sim.wait_full(FULL_S)
        self.say(f"zone loss of {zone} (placement {', '.join(f'{d} {zones_text(c)}' for d, c in placement.items())}): "
                 + ", ".join(f"{d} {left[d]} of {want[d]} ready" for d in RESTARTED)
                 + f"; {'back to full count' if back else 'NOT back to full count'}")
        return {"zone": zone, "placement": placement, "left": left, "want": want, "back": back}


def rollout_table(runs: dict[str, RolloutDrain]) -> str:
    lines = [f"per zone a/b/c after each round's drain; 'zone loss leaves' = replicas less the fullest zone"]
    for name, r in runs.items():
        lines.append(f"{name}  ({r.took:.0f}s{'; RAISED' if r.error else ''})")
        for d, note in r.data.get("terms", {}).items():
            lines.append(f"    {d} anti-affinity: {note}")
        if "install" in r.data:
            lines.append("    install: " + ", ".join(f"{d} {zones_text(c)}" for d, c in r.data["install"]["placement"].items()))
        for x in r.data["rounds"]:
            lines.append(f"    round {x['round']}: drain {x['target']} {x['drain_at_s']:.1f}s after the rollout "
                         f"({x['condition']}; old {DRAINED_FOR} terminating on {', '.join(x['lingering'][DRAINED_FOR]) or 'none'}): "
                         + ", ".join(f"{d} {zones_text(c)} (zone loss leaves {x['zone_loss_leaves'][d]} of {x['want'][d]}; "
                                     f"replacement {', '.join(x['replacements'][d]) or '-'})" for d, c in x["after"].items()))
        if "zone_loss" in r.data:
            z = r.data["zone_loss"]
            lines.append(f"    zone loss ({z['zone']}): " + ", ".join(f"{d} {z['left'][d]} of {z['want'][d]} ready" for d in RESTARTED))
    return "\n".join(lines)


def preview_text(binary_path: str) -> str:
    files = [str(f) for f in RELEASES["1.23"]]
    r = subprocess.run([binary_path, "preview", "--policy-file", str(POLICY), "-o", "yaml", *files], capture_output=True,
                       text=True, timeout=120)
    if r.returncode != 0:
        raise AssertionError(f"preview by {binary_path} failed: {r.stderr}")
    return r.stdout


class RolloutThenDrain(unittest.TestCase):
    """A drain right after a `kubectl rollout restart`: the replacement refills the zone the drain emptied
    (docs/policy.md: the policy's anti-affinity term carries matchLabelKeys [pod-template-hash], so the
    previous revision's terminating pods do not count). Runs, each on its own cluster, at once
    (KHW_ROLLOUT_SERIAL=1: one after the other), KHW_ROLLOUT_VARIANTS picking (default `under-test,
    before-synthesized`, and `before-binary` when KHW_E2E_BINARY_BEFORE is set):

    - `under-test`: `preview` by KHW_E2E_BINARY (the assertions are on this run);
    - `before-binary`: `preview` by KHW_E2E_BINARY_BEFORE (printed: whether its output differs);
    - `before-synthesized`: KHW_E2E_BINARY's output with matchLabelKeys taken off the policy's own term.
    """

    runs: dict[str, RolloutDrain] = {}

    @classmethod
    def setUpClass(cls):
        before = os.environ.get("KHW_E2E_BINARY_BEFORE") or None
        default = "under-test,before-synthesized" + (",before-binary" if before else "")
        names = [v.strip() for v in os.environ.get("KHW_ROLLOUT_VARIANTS", default).split(",") if v.strip()]
        unknown = [n for n in names if n not in ROLLOUT_VARIANTS]
        if unknown:
            raise AssertionError(f"KHW_ROLLOUT_VARIANTS: unknown {unknown} (known: {', '.join(ROLLOUT_VARIANTS)})")
        if "before-binary" in names and not before:
            raise AssertionError("KHW_ROLLOUT_VARIANTS names before-binary: set KHW_E2E_BINARY_BEFORE")
        parent = os.environ.get("KHW_E2E_WORKDIR") or None
        root = tempfile.mkdtemp(prefix="test_eventing-rollout-", dir=parent)
        binaries = {"under-test": binary(), "before-binary": before, "before-synthesized": binary()}
        transforms = {"before-synthesized": without_match_label_keys}
        cls.runs = {n: RolloutDrain(n, tempfile.mkdtemp(prefix=f"{n}-", dir=root), binaries[n], transforms.get(n))
                    for n in names}
        print(f"\n== Knative Eventing, a drain right after a rollout restart of {', '.join(RESTARTED)}: "
              f"{', '.join(names)}; {ROLLOUT_ROUNDS} rounds; fake kubelets: Ready {START_S:g}s after binding, "
              f"terminating pods kept {TERMINATING_S:g}s; work dir {root}", flush=True)
        if before:
            same = preview_text(before) == preview_text(binary())
            print(f"  preview output of KHW_E2E_BINARY_BEFORE ({before}) "
                  f"{'IDENTICAL to' if same else 'differs from'} KHW_E2E_BINARY's ({binary()})", flush=True)
        t = time.monotonic()
        if os.environ.get("KHW_ROLLOUT_SERIAL") == "1":
            for r in cls.runs.values():
                r.run()
        else:
            threads = [threading.Thread(target=r.run, name=f"rollout-{n}") for n, r in cls.runs.items()]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
        print(f"\n== a drain right after a rollout ({time.monotonic() - t:.0f}s)\n" + rollout_table(cls.runs), flush=True)

    def under_test(self) -> RolloutDrain:
        if "under-test" not in self.runs:
            self.skipTest("under-test not run (KHW_ROLLOUT_VARIANTS)")
        r = self.runs["under-test"]
        if r.error:
            self.fail(f"the run raised:\n{r.error}")
        return r

    def test_rollout_drain_installed_one_per_zone(self):
        r = self.under_test()
        self.assertTrue(r.data["install"]["rolled"] and r.data["install"]["settled"], r.data["install"])
        self.assertTrue(r.data["install"]["spread"], f"not 1/1/1 per zone after the install: {r.data['install']['placement']}")

    def test_rollout_drain_rollouts_and_drains_done(self):
        r = self.under_test()
        for x in r.data["rounds"]:
            with self.subTest(round=x["round"]):
                self.assertTrue(x["rolled"], f"round {x['round']}: rollout not done")
                self.assertTrue(x["drain_done"], f"round {x['round']}: {x['drain']}")
                self.assertTrue(x["replaced"], f"round {x['round']}: the drained pods not replaced in {FULL_S}s")

    def test_rollout_drain_refills_the_emptied_zone(self):
        """After each round's drain every zone holds one pod of each restarted Deployment."""
        r = self.under_test()
        for x in r.data["rounds"]:
            for d, c in x["after"].items():
                with self.subTest(round=x["round"], deployment=d):
                    self.assertEqual(c, [1, 1, 1], f"round {x['round']}: {d} per zone a/b/c after the drain of "
                                                   f"{x['target']} ({x['condition']}): {zones_text(c)}")

    def test_rollout_drain_then_zone_loss_leaves_two_of_three(self):
        r = self.under_test()
        z = r.data["zone_loss"]
        for d in RESTARTED:
            with self.subTest(deployment=d):
                self.assertGreaterEqual(z["left"][d], z["want"][d] - 1,
                                        f"zone loss of {z['zone']} on {z['placement']}: {d} {z['left'][d]} of {z['want'][d]} ready")


if __name__ == "__main__":
    unittest.main()
