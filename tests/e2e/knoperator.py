"""The real Knative Operator on the simulated multi-zone cluster (simcluster.py), alone or with the product.

`KHW_KNATIVE_OPERATOR` names the Operator's binary (`go build ./cmd/operator` of a knative/operator
snapshot; nothing of it is committed). Its manifests and CRDs are found

- beside the binary: `kodata/` (the tree's `cmd/operator/kodata`) and `crds/` (its
  `config/crd/bases/*.yaml`), e.g. as symlinks; or
- in the source tree `KHW_KNATIVE_OPERATOR_SRC` names: `cmd/operator/kodata` and `config/crd/bases`.

What running it on this control plane takes, done here per cluster:

- the CRDs (KnativeServing, KnativeEventing) without their conversion webhook stanza (one stored
  version; no Operator webhook runs), applied server-side (they are too large for kubectl's
  last-applied annotation);
- the controller manager also runs `clusterrole-aggregation`: the Operator reads the aggregated
  ClusterRoles of Knative's releases when it applies them;
- a copy of kodata without Knative's own webhook configurations and the objects Knative's webhook must
  admit (`install.KNATIVE_WEBHOOK_GROUPS`): no Knative process answers them (`kodata_without_webhooks`);
- the process itself, on this machine: the admin kubeconfig, `SYSTEM_NAMESPACE=knative-operator`
  (created here; its config-logging and config-observability are optional, sharedmain defaults them),
  `KO_DATA_PATH` the copy, a free `PROFILING_PORT`; its log is `knative-operator.log` in the work dir.

The product goes in as `install.Install` does (the chart through helm with the loopback post-renderer,
the server binary run here with the chart's ServiceAccount token), with `--set knativeOperator=true`
and the governed namespaces.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

import simcluster
from cluster import free_port, wait_for
from install import CHART, KNATIVE_WEBHOOK_GROUPS, NAMESPACE, RELEASE, WEBHOOK_NAME, Install, helm_bin
from simcluster import ROOT, SimCluster

ENV = "KHW_KNATIVE_OPERATOR"
SRC_ENV = "KHW_KNATIVE_OPERATOR_SRC"
SKIP_LINE = ("Knative Operator: skipped: set KHW_KNATIVE_OPERATOR to a knative/operator binary (kodata/ and crds/ "
             "beside it, or KHW_KNATIVE_OPERATOR_SRC its source tree) and KUBEBUILDER_ASSETS with kube-apiserver, "
             "etcd, kube-scheduler and kube-controller-manager (docs/testing.md)")
SYSTEM_NAMESPACE = "knative-operator"
SERVING = "knative-serving"
EVENTING = "knative-eventing"
CONTROLLERS = simcluster.CONTROLLERS + ",clusterrole-aggregation"
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
POLICY = ROOT / "examples" / "policy.yaml"
EVENTING_POLICY = ROOT / "examples" / "policies" / "knative-eventing.yaml"
PRIORITY_CLASS = ROOT / "examples" / "priorityclass.yaml"
MANAGED_BY = "app.kubernetes.io/managed-by"
LEADER_KEYS = ("buckets", "lease-duration", "renew-deadline", "retry-period")
# Scaled 0 <-> 1 by Knative Eventing itself (the Operator's haUnSupported list): never more replicas.
ONE_REPLICA_BY_DESIGN = ("pingsource-mt-adapter",)


@dataclass(frozen=True)
class Bundle:
    binary: Path
    kodata: Path
    crds: tuple[Path, ...]


def bundle() -> Bundle | None:
    """The Operator the environment names, or None (not set). A binary whose manifests or CRDs are not
    where the layout says is an error, not a skip."""
    b = os.environ.get(ENV)
    if not b:
        return None
    binary = Path(b)
    if not os.access(binary, os.X_OK):
        raise AssertionError(f"{ENV}={b}: not an executable file")
    src = os.environ.get(SRC_ENV)
    if src:
        kodata, crds = Path(src) / "cmd" / "operator" / "kodata", Path(src) / "config" / "crd" / "bases"
    else:
        kodata, crds = binary.parent / "kodata", binary.parent / "crds"
    files = tuple(sorted(crds.glob("*.yaml"))) if crds.is_dir() else ()
    if not (kodata / "knative-serving").is_dir() or not files:
        raise AssertionError(f"{ENV}={b}: no kodata/knative-serving or no CRDs at {kodata} and {crds} "
                             f"(put kodata/ and crds/ beside the binary, or set {SRC_ENV} to its source tree)")
    return Bundle(binary, kodata, files)


def ready() -> bool:
    return simcluster.assets_ready() and bool(os.environ.get(ENV))


# -- the Operator's manifests and CRDs ---------------------------------------------------------------
DOC_SPLIT = re.compile(r"^---[^\n]*$", re.M)


def top_level(doc: str, key: str) -> str | None:
    m = re.search(rf"^{key}:\s*['\"]?([^'\"\s]+)", doc, re.M)
    return m.group(1) if m else None


def needs_knative_webhook(doc: str) -> bool:
    """A webhook configuration of Knative's, or an object of a group Knative's webhook admits."""
    kind, api = top_level(doc, "kind"), top_level(doc, "apiVersion") or ""
    return kind in WEBHOOK_KINDS or any(api.startswith(g) for g in KNATIVE_WEBHOOK_GROUPS)


def kodata_without_webhooks(src: Path, dst: Path) -> dict[str, int]:
    """A copy of kodata with what needs Knative's webhook left out, every other document byte for byte;
    how many documents of each kind went."""
    shutil.copytree(src, dst, symlinks=False)
    left: dict[str, int] = {}
    for f in sorted(dst.rglob("*.yaml")):
        text = f.read_text()
        docs = DOC_SPLIT.split(text)
        kept = [d for d in docs if not needs_knative_webhook(d)]
        if len(kept) != len(docs):
            for d in docs:
                if needs_knative_webhook(d):
                    kind = top_level(d, "kind") or "?"
                    left[kind] = left.get(kind, 0) + 1
            f.write_text("\n---\n".join(d.strip("\n") for d in kept) + "\n")
    return left


def crds_without_conversion(files: tuple[Path, ...]) -> str:
    out = []
    for f in files:
        for d in yaml.safe_load_all(f.read_text()):
            if d and d.get("kind") == "CustomResourceDefinition":
                d["spec"].pop("conversion", None)
                out.append(d)
    return yaml.safe_dump_all(out)


# -- what a namespace holds ------------------------------------------------------------------------
def budget_text(spec: dict) -> str:
    for k in ("minAvailable", "maxUnavailable"):
        if k in spec:
            return f"{k} {spec[k]}"
    return "no budget"


class OperatorProcess:
    """The Operator's binary run here against the cluster; stopped by its PID."""

    def __init__(self, binary: Path, kubeconfig: str, kodata: Path, log: Path):
        self.cmd = [str(binary), f"--kubeconfig={kubeconfig}"]
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/tmp"),
                    "SYSTEM_NAMESPACE": SYSTEM_NAMESPACE, "POD_NAME": "knative-operator-e2e",
                    "KO_DATA_PATH": str(kodata), "METRICS_DOMAIN": "knative.dev/operator",
                    "CONFIG_LOGGING_NAME": "config-logging", "CONFIG_OBSERVABILITY_NAME": "config-observability",
                    "KUBERNETES_MIN_VERSION": "", "PROFILING_PORT": str(free_port())}
        self.log = log
        self.proc: subprocess.Popen | None = None
        self._f = None

    def start(self) -> "OperatorProcess":
        self._f = open(self.log, "a")
        self.proc = subprocess.Popen(self.cmd, env=self.env, stdout=self._f, stderr=subprocess.STDOUT)
        return self

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self._f:
            self._f.close()
            self._f = None

    def lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines() if self.log.exists() else []


def metric_sum(text: str, metric: str, **labels: str) -> float:
    """The sum of the samples of `metric` whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(metric + "{"):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total


class OperatorCluster:
    """One simulated cluster with the Operator running; with `product`, the chart and its server too."""

    def __init__(self, workdir: str, operator: Bundle, khw_binary: str, variant: str, product: bool):
        self.workdir = Path(workdir)
        self.bundle = operator
        self.khw_binary = khw_binary
        self.variant = variant
        self.product = product
        self.sim = SimCluster(workdir, khw_binary, variant, [], controllers=CONTROLLERS, namespaces=())
        self.operator: OperatorProcess | None = None
        self.install: Install | None = None
        self.gaps: list[str] = []  # what the product contract promises and this install could not use
        self.left_out: dict[str, int] = {}

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self) -> "OperatorCluster":
        self.sim.start()
        self.api = self.sim.api
        self.kubectl = self.sim.kubectl
        self.kodata = self.workdir / "kodata"
        self.left_out = kodata_without_webhooks(self.bundle.kodata, self.kodata)
        crds = crds_without_conversion(self.bundle.crds)
        # Once more if the first attempt fails (the API server just became ready).
        wait_for(lambda: self.kubectl.run("apply", "--server-side", "-f", "-", stdin=crds, check=False,
                                          timeout=120).returncode == 0, "the Operator's CRDs applied", 60, 2)
        for crd in ("knativeservings.operator.knative.dev", "knativeeventings.operator.knative.dev"):
            # Polled: `kubectl wait` errors out on a CRD that has no conditions yet.
            wait_for(lambda: self.kubectl.run("get", "crd", crd, "-o", "jsonpath={.status.conditions[?(@.type=='Established')]"
                                              ".status}", check=False).stdout == "True", f"{crd} established", 60, 1)
        self.ensure_namespace(SYSTEM_NAMESPACE)
        self.operator = OperatorProcess(self.bundle.binary, self.sim.plane.kubeconfig, self.kodata,
                                        self.workdir / "knative-operator.log").start()
        return self

    def stop(self) -> None:
        if self.operator is not None:
            self.operator.stop()
        if self.install is not None:
            self.install.stop_servers()
        self.sim.stop()

    def ensure_namespace(self, ns: str) -> None:
        if self.kubectl.run("get", "namespace", ns, "--ignore-not-found", "-o", "name").stdout.strip() == "":
            self.kubectl.run("create", "namespace", ns)

    def watch(self, *namespaces: str) -> None:
        """The namespaces whose Deployments the monitor samples (those that exist)."""
        self.sim.namespaces = tuple(namespaces)
        self.sim.monitor.namespaces = tuple(namespaces)

    # -- the product ------------------------------------------------------------------------------
    def install_product(self, governed: list[str]) -> list[str]:
        """The chart for an Operator install (`knativeOperator=true`, the governed namespaces), its server,
        the PriorityClass of examples/priorityclass.yaml. The sets used."""
        for ns in governed:
            self.ensure_namespace(ns)
        self.kubectl.apply(str(PRIORITY_CLASS))
        self.install = Install(self.sim.plane, self.khw_binary, str(self.workdir))
        sets = ["knativeOperator=true", "governedNamespaces={" + ",".join(governed) + "}"]
        if not self.chart_accepts(sets):
            self.gaps.append("the chart refuses --set knativeOperator=true (values schema): installed with "
                             "rbac.scope=cluster instead")
            sets = ["rbac.scope=cluster", "governedNamespaces={" + ",".join(governed) + "}"]
        self.install.install(*sets, governed_namespace_first=False)
        self.install.start_server()
        return sets

    def chart_accepts(self, sets: list[str]) -> bool:
        r = subprocess.run([helm_bin(), "template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                            "--set", "image.repository=registry.test/knative-ha-webhook",
                            *sum((["--set", s] for s in sets), [])], capture_output=True, text=True, timeout=120)
        return r.returncode == 0

    @property
    def server(self):
        return self.install.servers[-1]

    def server_log(self) -> str:
        return "\n".join(s.log_text() for s in self.install.servers if s.log.exists()) if self.install else ""

    def apply_policy(self, text: str, name: str, limit_s: float = 60) -> dict:
        """Applies a policy and waits for its Ready condition (whatever it says): the condition."""
        self.kubectl.apply(text)
        return wait_for(lambda: self.policy_condition(name), f"policy {name}'s Ready condition", limit_s)

    def policy(self, name: str) -> dict:
        return self.kubectl.json("highavailabilitypolicy", name)

    def policy_condition(self, name: str) -> dict | None:
        hap = self.policy(name)
        gen = hap["metadata"].get("generation")
        for c in hap.get("status", {}).get("conditions", []):
            if c["type"] == "Ready" and c.get("observedGeneration", gen) == gen:
                return c
        return None

    def webhook_metrics(self) -> dict[str, float]:
        text = self.sim.plane.raw("/metrics")
        label = {"name": WEBHOOK_NAME}
        return {"requests": metric_sum(text, "apiserver_admission_webhook_request_total", **label),
                "rejections": metric_sum(text, "apiserver_admission_webhook_rejection_count", **label),
                "fail_open": metric_sum(text, "apiserver_admission_webhook_fail_open_count", **label)}

    # -- Knative through the Operator ---------------------------------------------------------------
    def apply_cr(self, kind: str, ns: str, spec: dict) -> None:
        doc = {"apiVersion": "operator.knative.dev/v1beta1", "kind": kind, "metadata": {"name": ns, "namespace": ns},
               "spec": spec}
        self.kubectl.apply(json.dumps(doc) + "\n")

    def cr(self, kind: str, ns: str) -> dict:
        return self.kubectl.json("-n", ns, kind.lower(), ns)

    def patch_cr(self, kind: str, ns: str, patch: dict, kind_of_patch: str = "merge") -> None:
        self.kubectl.run("-n", ns, "patch", kind.lower(), ns, "--type", kind_of_patch, "-p", json.dumps(patch))

    def cr_ready(self, kind: str, ns: str, version: str | None = None) -> bool:
        cr = self.cr(kind, ns)
        st = cr.get("status", {})
        conds = {c["type"]: c["status"] for c in st.get("conditions", [])}
        return (conds.get("Ready") == "True" and st.get("observedGeneration") == cr["metadata"]["generation"]
                and (version is None or st.get("version", "").startswith(version)))

    def wait_cr_ready(self, kind: str, ns: str, version: str | None = None, limit_s: float = 300) -> float:
        """Seconds until the CR is Ready at its generation (and `version`); AssertionError after `limit_s`
        with the CR's conditions."""
        t = time.monotonic()
        try:
            wait_for(lambda: self.cr_ready(kind, ns, version), f"{kind} {ns} Ready", limit_s, 1)
        except AssertionError as e:
            conds = self.cr(kind, ns).get("status", {}).get("conditions", [])
            raise AssertionError(f"{e}; conditions: {json.dumps(conds)[:600]}") from None
        return time.monotonic() - t

    # -- facts -------------------------------------------------------------------------------------
    def items(self, ns: str, kind: str) -> list[dict]:
        path = {"deployments": f"/apis/apps/v1/namespaces/{ns}/deployments",
                "hpas": f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers",
                "pdbs": f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
                "configmaps": f"/api/v1/namespaces/{ns}/configmaps"}[kind]
        return self.api.get(path)["items"]

    def facts(self, ns: str) -> dict:
        """Per Deployment its replicas (or its HPA's range), per PDB its budget and allowed disruptions,
        the budgets the product created, config-leader-election's keys."""
        hpas = {h["spec"]["scaleTargetRef"]["name"]: h for h in self.items(ns, "hpas")}
        ready = self.sim.monitor.ready()
        deployments = {}
        for d in self.items(ns, "deployments"):
            name = d["metadata"]["name"]
            h = hpas.get(name)
            deployments[name] = {
                "replicas": d["spec"].get("replicas", 1), "ready": ready.get(f"{ns}/{name}", 0),
                "hpa": (h["spec"].get("minReplicas", 1), h["spec"]["maxReplicas"]) if h else None,
                "operator_owned": any(o.get("apiVersion", "").startswith("operator.knative.dev/")
                                      for o in d["metadata"].get("ownerReferences") or [])}
        pdbs = {}
        for p in self.items(ns, "pdbs"):
            labels = p["metadata"].get("labels") or {}
            pdbs[p["metadata"]["name"]] = {
                "budget": budget_text(p["spec"]), "allowed": p.get("status", {}).get("disruptionsAllowed"),
                "expected": p.get("status", {}).get("expectedPods"),
                "app": (p["spec"].get("selector", {}).get("matchLabels") or {}).get("app"),
                "created": labels.get(MANAGED_BY) == "knative-ha-webhook"}
        cm = next((c for c in self.items(ns, "configmaps") if c["metadata"]["name"] == "config-leader-election"), None)
        leader = {k: v for k, v in ((cm or {}).get("data") or {}).items() if k in LEADER_KEYS}
        return {"deployments": deployments, "pdbs": pdbs, "leader": leader}

    def governed_fields(self, ns: str) -> dict[str, object]:
        """The fields a policy sets, flattened (`Deployment/controller spec.replicas` -> 3): what an
        unmutated write can revert."""
        out: dict[str, object] = {}
        for d in self.items(ns, "deployments"):
            n, spec = d["metadata"]["name"], d["spec"]
            pod = spec["template"]["spec"]
            out[f"Deployment/{n} spec.replicas"] = spec.get("replicas")
            out[f"Deployment/{n} affinity"] = json.dumps(pod.get("affinity"), sort_keys=True)
            out[f"Deployment/{n} topologySpreadConstraints"] = json.dumps(pod.get("topologySpreadConstraints"), sort_keys=True)
            out[f"Deployment/{n} priorityClassName"] = pod.get("priorityClassName")
            out[f"Deployment/{n} strategy"] = json.dumps(spec.get("strategy"), sort_keys=True)
            out[f"Deployment/{n} leader-election-hash"] = (spec["template"]["metadata"].get("annotations") or {}).get(
                "knativeha.dev/leader-election-hash")
        for h in self.items(ns, "hpas"):
            n = h["metadata"]["name"]
            out[f"HPA/{n} minReplicas"] = h["spec"].get("minReplicas")
            out[f"HPA/{n} maxReplicas"] = h["spec"].get("maxReplicas")
        for p in self.items(ns, "pdbs"):
            out[f"PDB/{p['metadata']['name']} budget"] = budget_text(p["spec"])
        for c in self.items(ns, "configmaps"):
            if c["metadata"]["name"] == "config-leader-election":
                for k in LEADER_KEYS:
                    out[f"ConfigMap/config-leader-election {k}"] = (c.get("data") or {}).get(k)
        return out

    def state(self, ns: str) -> dict[tuple[str, str], tuple]:
        """Per governed object (kind, name): generation, resourceVersion and a hash of what is not status
        (labels, annotations, spec, data)."""
        out = {}
        for kind in ("deployments", "hpas", "pdbs", "configmaps"):
            for o in self.items(ns, kind):
                if kind == "configmaps" and o["metadata"]["name"] != "config-leader-election":
                    continue
                m = o["metadata"]
                body = {"labels": m.get("labels"), "annotations": m.get("annotations"), "spec": o.get("spec"),
                        "data": o.get("data")}
                digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
                out[(kind, m["name"])] = (m.get("generation", 0), m["resourceVersion"], digest)
        return out

    def update_requests(self, detail: bool = False):
        """UPDATE and PATCH requests the API server served for the governed kinds (not their status or
        scale): the Operator's applies among them, answered by the webhook or not. `detail`: per
        resource and verb."""
        text = self.sim.plane.raw("/metrics")
        out = {}
        for resource in ("deployments", "horizontalpodautoscalers", "poddisruptionbudgets", "configmaps"):
            for verb in ("UPDATE", "PATCH"):
                out[f"{resource} {verb}"] = metric_sum(text, "apiserver_request_total", resource=resource, verb=verb,
                                                       subresource="")
        return out if detail else sum(out.values())

    def operator_updates(self) -> int:
        return sum(1 for line in self.operator.lines() if '"Updating"' in line)

    def writes_at_rest(self, ns: str, seconds: float) -> dict:
        """Samples the governed objects every second for `seconds`: spec writes (generation moves of
        Deployments, HPAs and PDBs), content writes (labels, annotations, spec or data changed, a
        ConfigMap's included), resourceVersion moves (status too), which objects moved, the UPDATE/PATCH
        requests served for those kinds, the Operator's `Updating` log lines and the webhook's admissions."""
        before = self.state(ns)
        req0, ops0 = self.update_requests(detail=True), self.operator_updates()
        adm0 = self.webhook_metrics()["requests"] if self.install else 0.0
        last = before
        spec = content = rv = 0
        moved: dict[str, int] = {}
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(1)
            now = self.state(ns)
            for key, (gen, ver, digest) in now.items():
                old = last.get(key)
                if old is None:
                    moved[f"{key[0]}/{key[1]} (new)"] = moved.get(f"{key[0]}/{key[1]} (new)", 0) + 1
                    content += 1
                    continue
                if gen != old[0]:
                    spec += max(1, gen - old[0])
                if digest != old[2]:
                    content += 1
                if ver != old[1]:
                    rv += 1
                    if gen != old[0] or digest != old[2]:
                        moved[f"{key[0]}/{key[1]}"] = moved.get(f"{key[0]}/{key[1]}", 0) + 1
            for key in last.keys() - now.keys():
                moved[f"{key[0]}/{key[1]} (gone)"] = 1
                content += 1
            last = now
        adm = (self.webhook_metrics()["requests"] - adm0) if self.install else 0.0
        req1 = self.update_requests(detail=True)
        by = {k: int(req1[k] - req0.get(k, 0)) for k in req1 if req1[k] != req0.get(k, 0)}
        return {"seconds": seconds, "spec": spec, "content": content, "rv": rv, "moved": moved,
                "requests": sum(by.values()), "requests_by": by, "operator_updates": self.operator_updates() - ops0,
                "admissions": int(adm)}

    def operator_writes(self) -> int:
        """The Operator's `Creating`, `Updating` and `Deleting` log lines so far (its manifest applies)."""
        return sum(1 for line in self.operator.lines()
                   if any(f'"{m}"' in line for m in ("Creating", "Updating", "Deleting")))

    def wait_settled(self, ns: str, quiet_s: float = 20, limit_s: float = 240) -> float:
        """Until, for `quiet_s`, no governed object's content moved and the Operator logged no apply
        (Creating, Updating, Deleting: no-op updates too), or `limit_s`: the seconds waited. The Operator
        re-applies its whole manifest once after its first Ready, at about 5 objects a second."""
        t = time.monotonic()
        def marks():
            return ({k: (v[0], v[2]) for k, v in self.state(ns).items()}, self.operator_writes())
        last, since = marks(), time.monotonic()
        while time.monotonic() - t < limit_s:
            time.sleep(1)
            now = marks()
            if now != last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= quiet_s:
                break
        return time.monotonic() - t

    def wait_full(self, limit_s: float = 120) -> bool:
        return self.sim.wait_full(limit_s)

    def delete_namespace(self, ns: str, limit_s: float = 180) -> float:
        t = time.monotonic()
        self.kubectl.run("delete", "namespace", ns, "--wait=false", "--ignore-not-found")
        wait_for(lambda: self.kubectl.run("get", "namespace", ns, "--ignore-not-found", "-o", "name").stdout.strip() == "",
                 f"namespace {ns} gone", limit_s, 1)
        return time.monotonic() - t
