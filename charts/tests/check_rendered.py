#!/usr/bin/env python3
"""Renders the knative-ha-webhook chart for several value sets and checks the objects.

Called by charts/test.sh (which provides helm, kubernetes-validate, PyYAML and jsonschema).
Prints one line per check, `PASS <name>` or `FAIL <name>: <why>`, and exits non-zero on any
failure. The expectations below come from the server's contract (docs in common brief/README):
serve flags, HTTPS path /mutate, probe paths /healthz /readyz on the metrics port, and the exact
RBAC rules the cluster policy source uses.
"""

from __future__ import annotations

import argparse
import base64
import copy
import functools
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import jsonschema
import yaml

# ---------------------------------------------------------------------------------------------
# What the server needs: fixed by the project's contracts, not derived from the chart.

EXPECTED_CLUSTER_RULES = [
    {"apiGroups": ["knativeha.dev"], "resources": ["highavailabilitypolicies"], "verbs": ["list", "watch"]},
    {"apiGroups": ["knativeha.dev"], "resources": ["highavailabilitypolicies/status"], "verbs": ["patch"]},
    {"apiGroups": ["scheduling.k8s.io"], "resources": ["priorityclasses"], "verbs": ["list", "watch"]},
]
# HPAs and config-leader-election (by name: the watch's field selector): list/watch in each governed
# namespace only (serve --governed-namespaces watches nowhere else).
EXPECTED_HPA_RULES = [
    {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": ["list", "watch"]},
    # PDBs: a release's budget over a created one's pods makes a reconcile of the namespace due.
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["list", "watch"]},
    {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["config-leader-election"],
     "verbs": ["list", "watch"]},
]
EXPECTED_ROLE_RULES = [
    # patch: the knativeha.dev/last-valid-policy annotation on policy ConfigMaps.
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch", "patch"]},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
]
# `serve --reconcile`: a Role per governed namespace (patch dropped in dry-run mode) and a Lease Role
# in the release namespace (docs/reconcile.md "Bringing existing objects in line").
RECONCILE_LEASE = "knative-ha-webhook-reconcile"


# Knative's Deployments per namespace and the budget each release ships: the chart's copy of
# src/knative.rs's declaration (a cargo test keeps the two equal).
COMPONENTS = yaml.safe_load((Path(__file__).resolve().parents[1] / "knative-ha-webhook" / "files" /
                             "knative-components.yaml").read_text())


def expected_reconcile_rules(dry_run: bool, namespace: str | None, workloads: list[str]) -> list[dict]:
    """`namespace`: the Role's (None: the ClusterRole, every namespace's names). Writes go by name: patch on
    Knative's Deployments there and the workloads, patch/delete on their budgets; PDB create is unnamed."""
    spaces = list(COMPONENTS) if namespace is None else [namespace]
    names = sorted(set(workloads) | {d for ns in spaces for d in (COMPONENTS.get(ns) or {})})
    shipped = {p for ns in spaces for p in (COMPONENTS.get(ns) or {}).values() if p}
    pdbs = sorted(shipped | {f"{n}-pdb" for n in names})
    rules = [
        {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list"]},
        {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"],
         "verbs": ["get", "list"] if dry_run else ["get", "list", "patch"]},
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["config-leader-election"],
         "verbs": ["get"] if dry_run else ["get", "patch"]},
        # the KnativeServing/KnativeEventing, read for the fields the policy overrides (status.operatorOverrides)
        {"apiGroups": ["operator.knative.dev"], "resources": ["knativeservings", "knativeeventings"], "verbs": ["list"]},
    ]
    if dry_run:
        return rules
    if names:
        rules += [
            {"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": names, "verbs": ["patch"]},
            {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "resourceNames": pdbs,
             "verbs": ["patch", "delete"]},
        ]
    return rules + [
        {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["create"]},
        # an Event of its own on each write (src/reconcile/events.rs): created, never patched
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
    ]


EXPECTED_LEASE_RULES = [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [RECONCILE_LEASE],
     "verbs": ["get", "update"]},
]
# (apiGroup, resource) -> the one version the webhook wants to see (matchPolicy Equivalent).
EXPECTED_WEBHOOK_RESOURCES = {
    ("apps", "deployments"): "v1",
    ("", "configmaps"): "v1",
    ("autoscaling", "horizontalpodautoscalers"): "v2",
    ("policy", "poddisruptionbudgets"): "v1",
    ("apps", "deployments/scale"): "v1",
}
EXPECTED_OPERATIONS = ["CREATE", "UPDATE"]
# Operations per resource where they are not EXPECTED_OPERATIONS (a Scale is only ever updated).
EXPECTED_RESOURCE_OPERATIONS = {"deployments/scale": ["UPDATE"]}
MUTATE_PATH = "/mutate"
VALIDATE_PATH = "/validate"
# The ValidatingWebhookConfiguration: webhook name -> its one rule (policy objects only).
EXPECTED_VALIDATING_RULES = {
    "validate-policies.knativeha.dev": {
        "apiGroups": ["knativeha.dev"], "apiVersions": ["v1alpha1"],
        "resources": ["highavailabilitypolicies"], "operations": ["CREATE", "UPDATE"], "scope": "Cluster"},
    "validate-policy-configmaps.knativeha.dev": {
        "apiGroups": [""], "apiVersions": ["v1"],
        "resources": ["configmaps"], "operations": ["CREATE", "UPDATE"], "scope": "Namespaced"},
}
LIVENESS_PATH = "/healthz"
READINESS_PATH = "/readyz"
NONROOT_UID = 65532
KHW_CMD: list[str] = []  # how to run knative-ha-webhook (set from --khw-cmd)

CLUSTER_SCOPED = {
    "ClusterRole", "ClusterRoleBinding", "MutatingWebhookConfiguration", "HighAvailabilityPolicy",
    "CustomResourceDefinition", "ValidatingWebhookConfiguration",
}
CERT_MANAGER_KINDS = {"Issuer", "Certificate"}
CUSTOM_KINDS = CERT_MANAGER_KINDS | {"ServiceMonitor", "PrometheusRule", "HighAvailabilityPolicy"}
REQUIRED_LABELS = [
    "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
    "app.kubernetes.io/managed-by", "helm.sh/chart",
]

# ---------------------------------------------------------------------------------------------
# Reporting


class Report:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0

    def check(self, name: str, fn) -> None:
        """Runs fn(); an AssertionError (or any exception) is a failure with its message."""
        try:
            fn()
        except AssertionError as e:
            self.failed += 1
            print(f"FAIL {name}: {e}", flush=True)
            return
        except Exception as e:  # noqa: BLE001 - a crash in a check is a failed check
            self.failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
            return
        self.passed += 1
        print(f"PASS {name}", flush=True)


def expect(cond: bool, msg: str) -> None:
    if not cond:
        raise AssertionError(msg)


def eq(actual, expected, what: str) -> None:
    expect(actual == expected, f"{what}: expected {expected!r}, got {actual!r}")


# ---------------------------------------------------------------------------------------------
# Rendering


# The chart refuses to render without an image (none is published): every rendering here names one.
TEST_IMAGE = {"image": {"repository": "registry.test/knative-ha-webhook"}}


class Chart:
    def __init__(self, helm: str, chart: Path) -> None:
        self.helm = helm
        self.chart = chart

    def render(self, release: str, namespace: str, values: dict | None = None,
               sets: list[str] | None = None, api_versions: list[str] | None = None) -> subprocess.CompletedProcess:
        cmd = [self.helm, "template", release, str(self.chart), "--namespace", namespace]
        # `helm template` knows no cluster: .Capabilities.APIVersions holds only the built-in APIs
        # unless --api-versions adds one (as `helm install` would find it in a cluster's discovery).
        for api in api_versions or []:
            cmd += ["--api-versions", api]
        tmp = None
        values = deep_merge(TEST_IMAGE, values or {})
        if values:
            tmp = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
            yaml.safe_dump(values, tmp)
            tmp.close()
            cmd += ["--values", tmp.name]
        for s in sets or []:
            cmd += ["--set", s]
        try:
            return subprocess.run(cmd, capture_output=True, text=True, check=False)
        finally:
            if tmp:
                os.unlink(tmp.name)


def load_docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


class Rendered:
    """One rendering: the documents plus lookups."""

    def __init__(self, text: str, release: str, namespace: str, values: dict,
                 api_versions: list[str] | None = None) -> None:
        self.text = text
        self.docs = load_docs(text)
        self.release = release
        self.namespace = namespace
        self.values = values
        self.api_versions = set(api_versions or [])

    def of_kind(self, kind: str) -> list[dict]:
        return [d for d in self.docs if d.get("kind") == kind]

    def one(self, kind: str, name: str | None = None) -> dict:
        found = [d for d in self.of_kind(kind) if name is None or d["metadata"]["name"] == name]
        expect(len(found) == 1, f"expected exactly one {kind}{' ' + name if name else ''}, found {len(found)}")
        return found[0]

    @property
    def deployment(self) -> dict:
        return self.one("Deployment")

    @property
    def container(self) -> dict:
        cs = self.deployment["spec"]["template"]["spec"]["containers"]
        expect(len(cs) == 1, f"expected one container, got {len(cs)}")
        return cs[0]

    @property
    def service(self) -> dict:
        """The webhook's Service (the one the API server calls)."""
        found = [d for d in self.of_kind("Service") if d["metadata"]["labels"].get(METRICS_COMPONENT[0]) is None]
        expect(len(found) == 1, f"expected exactly one webhook Service, found {len(found)}")
        return found[0]

    @property
    def metrics_services(self) -> list[dict]:
        """The separate metrics Services (service.exposeMetrics, serviceMonitor.enabled)."""
        return [d for d in self.of_kind("Service")
                if d["metadata"]["labels"].get(METRICS_COMPONENT[0]) == METRICS_COMPONENT[1]]

    @property
    def webhook_config(self) -> dict:
        return self.one("MutatingWebhookConfiguration")

    def args(self) -> dict[str, str]:
        """`serve --flag value ...` -> {flag: value}; asserts the subcommand."""
        c = self.container
        argv = list(c.get("command", [])) + list(c.get("args", []))
        expect(argv[:1] == ["serve"], f"container must run `serve` (entrypoint is the binary), got {argv[:1]}")
        out: dict[str, str] = {}
        it = iter(argv[1:])
        for a in it:
            expect(a.startswith("--"), f"unexpected positional argument {a!r}")
            if "=" in a:
                k, v = a.split("=", 1)
            else:
                k, v = a, next(it, None)
                expect(v is not None and not v.startswith("--"), f"flag {a} has no value")
            out[k] = v
        return out

    def container_port(self, ref) -> int:
        """Resolves a named or numeric container port of the webhook container."""
        ports = self.container.get("ports", [])
        if isinstance(ref, int):
            expect(any(p["containerPort"] == ref for p in ports), f"port {ref} is not a container port")
            return ref
        named = [p["containerPort"] for p in ports if p.get("name") == ref]
        expect(len(named) == 1, f"container has no single port named {ref!r}")
        return named[0]


def listen_port(addr: str) -> int:
    m = re.fullmatch(r"(?:\[[0-9a-fA-F:]+\]|[0-9.]+|[A-Za-z0-9.-]*):(\d+)", addr)
    expect(m is not None, f"bad listen address {addr!r}")
    return int(m.group(1))


def duration_seconds(d: str) -> float:
    total = 0.0
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", d)
    expect(parts and "".join(a + b for a, b in parts) == d, f"bad duration {d!r}")
    for num, unit in parts:
        total += float(num) * units[unit]
    return total


def selector_matches(selector: dict, labels: dict) -> bool:
    ml = selector.get("matchLabels", {})
    if not ml and not selector.get("matchExpressions"):
        return False  # an empty selector matches everything: never what we want
    return all(labels.get(k) == v for k, v in ml.items())


# ---------------------------------------------------------------------------------------------
# Checks on one rendering


def check_rendering(r: Rendered, rep: Report, label: str, crd_schema: dict | None) -> None:
    v = r.values
    ns = r.namespace

    cluster_rbac = v.get("rbac", {}).get("scope", "namespaced") == "cluster" or bool(v.get("knativeOperator"))

    def namespaces():
        for d in r.docs:
            kind, md = d["kind"], d["metadata"]
            if cluster_rbac:
                # Nothing in a governed namespace, so `helm install` works before
                # Knative created it.
                expect(md.get("namespace") in (None, ns),
                       f"{kind}/{md['name']} is in {md.get('namespace')!r}: rbac.scope=cluster renders nothing outside {ns!r}")
            if kind in ("Role", "RoleBinding") and md["name"].endswith("-reconcile") \
                    and md.get("namespace") in v["governedNamespaces"] and v["reconcile"]["enabled"]:
                continue  # the reconciler's Roles live in the governed namespaces (checked in rbac)
            if kind in ("Role", "RoleBinding") and md["name"].endswith("-hpas") \
                    and md.get("namespace") in v["governedNamespaces"]:
                continue  # HPA list/watch is granted per governed namespace (checked in rbac)
            if kind in CLUSTER_SCOPED:
                expect("namespace" not in md, f"{kind}/{md['name']} is cluster-scoped but has namespace {md.get('namespace')!r}")
            else:
                eq(md.get("namespace"), ns, f"{kind}/{md['name']} namespace (must be .Release.Namespace)")
    rep.check(f"{label}: every namespaced object is in the release namespace {ns!r}", namespaces)

    def labels():
        for d in r.docs:
            lab = d["metadata"].get("labels", {})
            missing = [k for k in REQUIRED_LABELS if k not in lab]
            expect(not missing, f"{d['kind']}/{d['metadata']['name']} lacks labels {missing}")
            eq(lab["app.kubernetes.io/instance"], r.release, f"{d['kind']} instance label")
            for k, val in v.get("commonLabels", {}).items():
                eq(lab.get(k), val, f"{d['kind']}/{d['metadata']['name']} commonLabels {k}")
    rep.check(f"{label}: standard app.kubernetes.io labels on every object", labels)

    def webhook():
        cfg = r.webhook_config
        hooks = cfg["webhooks"]
        eq(len(hooks), 1, "number of webhooks")
        h = hooks[0]
        seen = {}
        for rule in h["rules"]:
            want_ops = EXPECTED_RESOURCE_OPERATIONS.get(rule["resources"][0], EXPECTED_OPERATIONS)
            eq(sorted(rule["operations"]), want_ops, f"operations of {rule['resources']}")
            eq(rule.get("scope"), "Namespaced", f"scope of {rule['resources']}")
            for g in rule["apiGroups"]:
                for res in rule["resources"]:
                    expect("*" not in (g, res), f"wildcard in rule {rule}")
                    seen[(g, res)] = rule["apiVersions"]
        eq({k: v_ for k, v_ in seen.items()}, {k: [ver] for k, ver in EXPECTED_WEBHOOK_RESOURCES.items()},
           "webhook (apiGroup, resource) -> apiVersions")
        eq(h["admissionReviewVersions"], ["v1"], "admissionReviewVersions")
        eq(h["sideEffects"], "None", "sideEffects")
        eq(h["matchPolicy"], "Equivalent", "matchPolicy")
        eq(h["failurePolicy"], v["webhook"]["failurePolicy"], "failurePolicy")
        expect(isinstance(h["timeoutSeconds"], int) and 1 <= h["timeoutSeconds"] <= 5,
               f"timeoutSeconds {h['timeoutSeconds']!r} not in 1..5")
        eq(h["timeoutSeconds"], v["webhook"]["timeoutSeconds"], "timeoutSeconds")
        eq(h["reinvocationPolicy"], v["webhook"]["reinvocationPolicy"], "reinvocationPolicy")
        expect(h["name"].count(".") >= 2, f"webhook name {h['name']!r} is not fully qualified")
    rep.check(f"{label}: webhook rules, operations, versions, failurePolicy, timeout, sideEffects, reinvocation", webhook)

    def selectors():
        h = r.webhook_config["webhooks"][0]
        exprs = h["namespaceSelector"]["matchExpressions"]
        eq(len(exprs), 1, "namespaceSelector expressions")
        e = exprs[0]
        eq((e["key"], e["operator"]), ("kubernetes.io/metadata.name", "In"), "namespaceSelector key/operator")
        eq(e["values"], v["governedNamespaces"], "namespaceSelector values")
        expect(ns not in e["values"], f"the release namespace {ns} is governed")
        expect("matchLabels" not in h["namespaceSelector"], "unexpected namespaceSelector.matchLabels")
        skip = {"key": "knativeha.dev/skip", "operator": "NotIn", "values": ["true"]}
        if v["webhook"].get("honorSkipLabel", True):
            eq(h.get("objectSelector"), {"matchExpressions": [skip]}, "objectSelector")
        else:
            expect("objectSelector" not in h, "objectSelector rendered although honorSkipLabel=false")
    rep.check(f"{label}: namespaceSelector = governedNamespaces {v['governedNamespaces']}, skip-label objectSelector", selectors)

    def reconciler_excluded():
        h = r.webhook_config["webhooks"][0]
        sa_name = r.deployment["spec"]["template"]["spec"]["serviceAccountName"]
        # Of the ConfigMaps only config-leader-election reaches the webhook.
        want = [{"name": "only-config-leader-election",
                 "expression": "request.resource.resource != 'configmaps' || "
                               "object.metadata.name == 'config-leader-election'"}]
        if v["reconcile"]["enabled"]:
            want.append({"name": "not-the-reconciler",
                         "expression": f"request.userInfo.username != 'system:serviceaccount:{ns}:{sa_name}'"})
        eq(h.get("matchConditions"), want,
           "matchConditions: config-leader-election only, and (reconcile on) not the reconciler's ServiceAccount")
    rep.check(f"{label}: only config-leader-election of the ConfigMaps, the reconciler's own writes not re-mutated (matchConditions)",
              reconciler_excluded)

    def wiring():
        h = r.webhook_config["webhooks"][0]
        svc_ref = h["clientConfig"]["service"]
        expect("url" not in h["clientConfig"], "clientConfig.url must not be set")
        svc = r.service
        eq(svc_ref["name"], svc["metadata"]["name"], "clientConfig.service.name")
        eq(svc_ref["namespace"], ns, "clientConfig.service.namespace")
        eq(svc_ref["path"], MUTATE_PATH, "clientConfig.service.path")
        sp = [p for p in svc["spec"]["ports"] if p["port"] == svc_ref.get("port", 443)]
        eq(len(sp), 1, f"Service ports numbered {svc_ref.get('port', 443)}")
        eq(sp[0]["port"], v["service"]["port"], "Service HTTPS port vs service.port")
        eq(sp[0]["name"], "https", "Service HTTPS port name")
        target = r.container_port(sp[0]["targetPort"])
        args = r.args()
        eq(target, listen_port(args["--listen"]), "Service targetPort vs the container's --listen port")
        eq(r.container_port("https"), target, "container port named https")
        expect(selector_matches({"matchLabels": svc["spec"]["selector"]},
                                r.deployment["spec"]["template"]["metadata"]["labels"]),
               "Service selector does not select the webhook pods")
        eq([p["name"] for p in svc["spec"]["ports"]], ["https"], "the webhook Service carries admission only")
        want_metrics = bool(v["service"].get("exposeMetrics") or v["serviceMonitor"]["enabled"])
        eq(len(r.metrics_services), int(want_metrics), "metrics Services (service.exposeMetrics, serviceMonitor.enabled)")
        for msvc in r.metrics_services:
            (metrics,) = msvc["spec"]["ports"]
            eq(metrics["port"], v["service"]["metricsPort"], "metrics Service port vs service.metricsPort")
            eq(r.container_port(metrics["targetPort"]), listen_port(args["--metrics-listen"]),
               "metrics Service targetPort vs --metrics-listen")
            expect(selector_matches({"matchLabels": msvc["spec"]["selector"]},
                                    r.deployment["spec"]["template"]["metadata"]["labels"]),
                   "metrics Service selector does not select the webhook pods")
        eq(args.get("--governed-namespaces"), ",".join(v["governedNamespaces"]),
           "--governed-namespaces vs governedNamespaces")
    rep.check(f"{label}: Service 443 -> --listen port and webhook path {MUTATE_PATH}", wiring)

    def probes():
        c = r.container
        mport = listen_port(r.args()["--metrics-listen"])
        for probe, path in (("livenessProbe", LIVENESS_PATH), ("readinessProbe", READINESS_PATH)):
            p = c[probe]["httpGet"]
            eq(p["path"], path, f"{probe} path")
            eq(r.container_port(p["port"]), mport, f"{probe} port vs --metrics-listen")
            eq(p.get("scheme", "HTTP"), "HTTP", f"{probe} scheme")
    rep.check(f"{label}: probes {LIVENESS_PATH} {READINESS_PATH} on the --metrics-listen port", probes)

    def args_and_tls_mount():
        args = r.args()
        dep = r.deployment["spec"]["template"]["spec"]
        mounts = {m["name"]: m for m in r.container.get("volumeMounts", [])}
        vols = {vv["name"]: vv for vv in dep.get("volumes", [])}
        for flag in ("--tls-cert", "--tls-key"):
            path = args[flag]
            owner = [m for m in mounts.values() if path.startswith(m["mountPath"].rstrip("/") + "/")]
            eq(len(owner), 1, f"{flag} {path} mounted volumes")
            m = owner[0]
            expect("subPath" not in m and "subPathExpr" not in m,
                   f"{flag} mounted with subPath: Secret updates (..data swap) would never reach the server")
            expect(m.get("readOnly") is True, f"{flag} mount is not readOnly")
            secret = vols[m["name"]].get("secret")
            expect(secret is not None, f"{flag} volume is not a Secret")
            eq(Path(path).name, {"--tls-cert": "tls.crt", "--tls-key": "tls.key"}[flag], f"{flag} file name")
        eq(args["--shutdown-delay"], v["server"]["shutdownDelay"], "--shutdown-delay")
        eq(args["--log-format"], v["server"]["logFormat"], "--log-format")
        eq(args["--on-error"], v["server"]["onError"], "--on-error")
        expect("--policy-file" not in args and "--self-signed" not in args,
               "in a cluster the server must read policies from the API and use the mounted certificate")
        env = {e["name"]: e for e in r.container.get("env", [])}
        eq(env.get("POD_NAMESPACE", {}).get("valueFrom"), {"fieldRef": {"fieldPath": "metadata.namespace"}},
           "POD_NAMESPACE from the downward API")
    rep.check(f"{label}: serve args, TLS Secret mounted as a directory, POD_NAMESPACE", args_and_tls_mount)

    def hardening():
        pod = r.deployment["spec"]["template"]["spec"]
        psc = pod.get("securityContext", {})
        csc = r.container.get("securityContext", {})
        eq(csc.get("runAsNonRoot", psc.get("runAsNonRoot")), True, "runAsNonRoot")
        eq(csc.get("runAsUser", psc.get("runAsUser")), NONROOT_UID, "runAsUser")
        eq(csc.get("readOnlyRootFilesystem"), True, "readOnlyRootFilesystem")
        eq(csc.get("allowPrivilegeEscalation"), False, "allowPrivilegeEscalation")
        expect(csc.get("privileged") in (None, False), "privileged")
        eq(csc.get("capabilities", {}).get("drop"), ["ALL"], "capabilities.drop")
        expect(not csc.get("capabilities", {}).get("add"), "capabilities.add must be empty")
        seccomp = csc.get("seccompProfile", psc.get("seccompProfile", {}))
        eq(seccomp.get("type"), "RuntimeDefault", "container seccompProfile.type")
        # Where the pod level sets them too, it must agree (it applies to every other container).
        for key, want in (("seccompProfile", {"type": "RuntimeDefault"}), ("runAsNonRoot", True),
                          ("runAsUser", NONROOT_UID)):
            if key in psc:
                eq(psc[key], want, f"pod securityContext.{key}")
        eq(pod.get("automountServiceAccountToken"), True, "automountServiceAccountToken (the server watches the API)")
        expect(not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC"), "host namespaces")
        res = r.container.get("resources", {})
        expect(res.get("requests", {}).get("cpu") and res.get("requests", {}).get("memory"), "resource requests")
        expect(res.get("limits", {}).get("memory"), "memory limit")
    rep.check(f"{label}: hardened security context and resources", hardening)

    def image():
        img = v["image"]
        want = (f"{img['repository']}@{img['digest']}" if img.get("digest")
                else f"{img['repository']}:{img.get('tag') or '<appVersion>'}")
        got = r.container["image"]
        if want.endswith(":<appVersion>"):
            expect(got.startswith(img["repository"] + ":") and len(got) > len(img["repository"]) + 1, f"image {got!r}")
        else:
            eq(got, want, "image")
        eq(r.container["imagePullPolicy"], img["pullPolicy"], "imagePullPolicy")
        eq(r.deployment["spec"]["template"]["spec"].get("imagePullSecrets", []), v.get("imagePullSecrets", []),
           "imagePullSecrets")
        pod = r.deployment["spec"]["template"]
        for k, val in v.get("podLabels", {}).items():
            eq(pod["metadata"]["labels"].get(k), val, f"pod label {k}")
        for k, val in v.get("podAnnotations", {}).items():
            eq(pod["metadata"].get("annotations", {}).get(k), val, f"pod annotation {k}")
        spec = pod["spec"]
        eq(spec.get("nodeSelector", {}), v.get("nodeSelector", {}), "nodeSelector")
        eq(spec.get("tolerations", []), v.get("tolerations", []), "tolerations")
        eq(spec.get("priorityClassName", ""), v.get("priorityClassName", ""), "priorityClassName")
    rep.check(f"{label}: image, pull secrets, pod labels/annotations, scheduling values", image)

    def availability():
        dep = r.deployment
        pod = dep["spec"]["template"]["spec"]
        pod_labels = dep["spec"]["template"]["metadata"]["labels"]
        eq(dep["spec"]["replicas"], v["replicaCount"], "replicas")
        expect(selector_matches(dep["spec"]["selector"], pod_labels), "Deployment selector")
        grace = pod["terminationGracePeriodSeconds"]
        delay = duration_seconds(r.args()["--shutdown-delay"])
        timeout = r.webhook_config["webhooks"][0]["timeoutSeconds"]
        expect(grace > delay, f"terminationGracePeriodSeconds {grace} must exceed --shutdown-delay {delay}s")
        expect(grace >= delay + timeout,
               f"terminationGracePeriodSeconds {grace} < shutdown delay {delay}s + webhook timeout {timeout}s")
        eq(dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], 0, "rolling update maxUnavailable")
        pdbs = r.of_kind("PodDisruptionBudget")
        eq(len(pdbs), 1, "PodDisruptionBudgets")
        eq(pdbs[0]["spec"].get("maxUnavailable"), 1, "PDB maxUnavailable")
        eq(pdbs[0]["spec"].get("unhealthyPodEvictionPolicy"), "AlwaysAllow", "PDB unhealthyPodEvictionPolicy")
        expect(selector_matches(pdbs[0]["spec"]["selector"], pod_labels), "PDB selector does not select the pods")
        aff = pod.get("affinity", {}).get("podAntiAffinity", {})
        terms = [t["podAffinityTerm"] for t in aff.get("preferredDuringSchedulingIgnoredDuringExecution", [])]
        terms += aff.get("requiredDuringSchedulingIgnoredDuringExecution", [])
        spread = pod.get("topologySpreadConstraints", [])
        expect(terms or spread, "neither pod anti-affinity nor topology spread")
        for t in terms + spread:
            expect(selector_matches(t["labelSelector"], pod_labels), f"anti-affinity/spread selector {t['labelSelector']}")
        mode = v.get("podAntiAffinity", {}).get("type", "soft")
        if not v.get("affinity"):
            key = {"soft": "preferredDuringSchedulingIgnoredDuringExecution",
                   "hard": "requiredDuringSchedulingIgnoredDuringExecution"}.get(mode)
            if key:
                expect(aff.get(key), f"podAntiAffinity.type={mode} but no {key}")
    rep.check(f"{label}: HA (replicas, PDB maxUnavailable 1, anti-affinity/spread, grace > shutdown delay)", availability)

    def rbac():
        sa_name = r.deployment["spec"]["template"]["spec"]["serviceAccountName"]
        if v["serviceAccount"].get("create", True):
            sa = r.one("ServiceAccount", sa_name)
            eq(sa["metadata"]["namespace"], ns, "ServiceAccount namespace")
        # rbac.scope=namespaced (default): a Role per governed namespace (they must exist);
        # cluster: the same rules in one ClusterRole each, bound cluster-wide.
        per_ns_kind = "ClusterRole" if cluster_rbac else "Role"
        cr = [d for d in r.of_kind("ClusterRole") if d["rules"] == EXPECTED_CLUSTER_RULES]
        expect(len(cr) == 1, f"one ClusterRole with the policy rules, found {len(cr)}")
        cr = cr[0]
        full = cr["metadata"]["name"]
        role = r.one("Role", full)
        eq(role["rules"], EXPECTED_ROLE_RULES, "Role rules")
        eq(role["metadata"]["namespace"], ns, "Role namespace")
        bound_roles = [("ClusterRoleBinding", cr), ("RoleBinding", role)]
        hpa_roles = [d for d in r.of_kind(per_ns_kind) if d["metadata"]["name"] == f"{full}-hpas"]
        if cluster_rbac:
            eq(len(hpa_roles), 1, "HPA ClusterRole: one")
        else:
            eq(sorted(d["metadata"]["namespace"] for d in hpa_roles), sorted(v["governedNamespaces"]),
               "HPA Roles: one per governed namespace")
        for d in hpa_roles:
            eq(d["rules"], EXPECTED_HPA_RULES, f"HPA {per_ns_kind} rules in {d['metadata'].get('namespace')}")
            bound_roles.append(("ClusterRoleBinding" if cluster_rbac else "RoleBinding", d))
        rc = v["reconcile"]
        if rc["enabled"]:
            lease = r.one("Role", f"{full}-reconcile-lease")
            eq(lease["metadata"]["namespace"], ns, "Lease Role namespace")
            eq(lease["rules"], EXPECTED_LEASE_RULES, "Lease Role rules")
            bound_roles.append(("RoleBinding", lease))
            per_ns = [d for d in r.of_kind(per_ns_kind) if d["metadata"]["name"] == f"{full}-reconcile"]
            if cluster_rbac:
                eq(len(per_ns), 1, "reconcile ClusterRole: one")
            else:
                eq(sorted(d["metadata"]["namespace"] for d in per_ns), sorted(v["governedNamespaces"]),
                   "reconcile Roles: one per governed namespace")
            for d in per_ns:
                eq(d["rules"], expected_reconcile_rules(rc["dryRun"], None if cluster_rbac else d["metadata"]["namespace"],
                                                        v["rbac"].get("workloads") or []),
                   f"reconcile {per_ns_kind} rules in {d['metadata'].get('namespace')}")
                bound_roles.append(("ClusterRoleBinding" if cluster_rbac else "RoleBinding", d))
        for kind, bound in bound_roles:
            md = bound["metadata"]
            b = [d for d in r.of_kind(kind) if d["metadata"]["name"] == md["name"]
                 and d["metadata"].get("namespace") == md.get("namespace")]
            expect(len(b) == 1, f"expected one {kind} for {md['name']} in {md.get('namespace')}, found {len(b)}")
            b = b[0]
            eq(b["roleRef"], {"apiGroup": "rbac.authorization.k8s.io", "kind": bound["kind"],
                              "name": md["name"]}, f"{kind} roleRef")
            eq(b["subjects"], [{"kind": "ServiceAccount", "name": sa_name, "namespace": ns}], f"{kind} subjects")
        kinds = {d["kind"] for d in r.docs}
        eq(kinds & {"ClusterRole", "Role"}, {"ClusterRole", "Role"}, "RBAC kinds")
        per_ns_roles = 1 if cluster_rbac else len(v["governedNamespaces"])
        want_roles = 2 + per_ns_roles + (per_ns_roles + 1 if rc["enabled"] else 0)
        eq(len(r.of_kind("ClusterRole")) + len(r.of_kind("Role")), want_roles, "number of roles")
        eq(len(r.of_kind("ClusterRoleBinding")) + len(r.of_kind("RoleBinding")), want_roles, "number of bindings")
    rep.check(f"{label}: RBAC exactly the server's rules, bound to its ServiceAccount", rbac)

    def reconcile_env():
        env = {e["name"]: e for e in r.container.get("env", [])}
        rc = v["reconcile"]
        names = ["KHW_RECONCILE", "KHW_RECONCILE_INTERVAL", "KHW_RECONCILE_DRY_RUN",
                 "KHW_RECONCILE_POD_TEMPLATES", "KHW_RECONCILE_RATE"]
        # with or without the reconciler: admission undoes only with the opt-in
        eq(env["KHW_UNDO_UNCLAIMED"].get("value"), str(v["undoWhenPolicyDeleted"]).lower(),
           "KHW_UNDO_UNCLAIMED (undoWhenPolicyDeleted)")
        if KHW_CMD:
            res = subprocess.run([*KHW_CMD, "serve", "--help"], capture_output=True, text=True, check=False)
            expect("env: KHW_UNDO_UNCLAIMED=" in res.stdout, "`serve --help` does not read KHW_UNDO_UNCLAIMED")
        if not rc["enabled"]:
            expect(not any(n in env for n in names + ["POD_NAME"]), f"reconcile off but env has {sorted(env)}")
            return
        eq(env["POD_NAME"].get("valueFrom"), {"fieldRef": {"fieldPath": "metadata.name"}}, "POD_NAME (Lease holder)")
        want = {"KHW_RECONCILE": "true", "KHW_RECONCILE_INTERVAL": rc["interval"],
                "KHW_RECONCILE_DRY_RUN": str(rc["dryRun"]).lower(),
                "KHW_RECONCILE_POD_TEMPLATES": str(rc["podTemplates"]).lower(),
                "KHW_RECONCILE_RATE": str(rc["rate"])}
        for name, value in want.items():
            eq(env[name].get("value"), value, name)
        if KHW_CMD:  # every env var is one `serve` reads
            res = subprocess.run([*KHW_CMD, "serve", "--help"], capture_output=True, text=True, check=False)
            missing = [n for n in names if f"env: {n}=" not in res.stdout]
            expect(not missing, f"`serve --help` does not read {missing}")
    rep.check(f"{label}: reconcile env (KHW_RECONCILE*, POD_NAME) follows reconcile values, "
              "KHW_UNDO_UNCLAIMED undoWhenPolicyDeleted", reconcile_env)

    def tls():
        cfg = r.webhook_config
        h = cfg["webhooks"][0]
        ann = cfg["metadata"].get("annotations", {})
        vols = {vv["name"]: vv for vv in r.deployment["spec"]["template"]["spec"]["volumes"]}
        tls_secret = vols["tls"]["secret"]["secretName"]
        svc = r.service["metadata"]["name"]
        if v["certManager"]["enabled"]:
            inject = ann.get("cert-manager.io/inject-ca-from", "")
            expect("/" in inject, f"inject-ca-from {inject!r} is not <namespace>/<certificate>")
            cns, cname = inject.split("/", 1)
            eq(cns, ns, "inject-ca-from namespace")
            cert = r.one("Certificate", cname)  # the annotation names a Certificate rendered here
            s = cert["spec"]
            eq(s["secretName"], tls_secret, "serving Certificate secretName vs the mounted Secret")
            eq(sorted(s["dnsNames"]), sorted([svc, f"{svc}.{ns}", f"{svc}.{ns}.svc", f"{svc}.{ns}.svc.cluster.local"]),
               "serving Certificate dnsNames")
            expect(not s.get("isCA"), "serving certificate must not be a CA")
            expect("server auth" in s.get("usages", ["server auth"]), "serving usages lack server auth")
            issuer = r.one("Issuer", s["issuerRef"]["name"])
            eq(s["issuerRef"].get("kind", "Issuer"), "Issuer", "serving issuerRef kind")
            ca_secret = issuer["spec"]["ca"]["secretName"]
            ca_certs = [c for c in r.of_kind("Certificate") if c["spec"]["secretName"] == ca_secret]
            eq(len(ca_certs), 1, f"Certificates writing the CA Secret {ca_secret}")
            ca = ca_certs[0]["spec"]
            eq(ca.get("isCA"), True, "CA Certificate isCA")
            root = r.one("Issuer", ca["issuerRef"]["name"])
            eq(root["spec"], {"selfSigned": {}}, "CA Certificate issuer is self-signed")
            eq(len(r.of_kind("Issuer")), 2, "Issuers")
            eq(len(r.of_kind("Certificate")), 2, "Certificates")
            expect("caBundle" not in h["clientConfig"], "caBundle must be left to cert-manager's cainjector")
            for d in r.of_kind("Issuer") + r.of_kind("Certificate"):
                eq(d["apiVersion"], "cert-manager.io/v1", f"{d['kind']} apiVersion")
        else:
            expect(not (r.of_kind("Issuer") or r.of_kind("Certificate")), "cert-manager objects rendered although disabled")
            expect("cert-manager.io/inject-ca-from" not in ann, "inject-ca-from rendered although cert-manager is off")
            eq(tls_secret, v["tls"]["existingSecret"], "mounted Secret vs tls.existingSecret")
            eq(h["clientConfig"].get("caBundle"), v["tls"]["caBundle"], "clientConfig.caBundle")
            pem = base64.b64decode(h["clientConfig"]["caBundle"]).decode()
            expect("-----BEGIN CERTIFICATE-----" in pem, "caBundle does not decode to a PEM certificate")
    mode = "cert-manager" if v["certManager"]["enabled"] else "existing Secret + caBundle"
    rep.check(f"{label}: TLS via {mode} (inject-ca-from names the rendered serving Certificate, SANs)", tls)

    def validating():
        vwcs = r.of_kind("ValidatingWebhookConfiguration")
        if not v["webhook"]["validation"]["enabled"]:
            eq(vwcs, [], "ValidatingWebhookConfigurations (webhook.validation.enabled=false)")
            return
        eq(len(vwcs), 1, "ValidatingWebhookConfigurations")
        cfg, mutating = vwcs[0], r.webhook_config
        eq(cfg["metadata"]["name"], mutating["metadata"]["name"], "name (as the MutatingWebhookConfiguration)")
        eq(cfg["metadata"].get("annotations"), mutating["metadata"].get("annotations"),
           "annotations (cert-manager inject-ca-from, webhook.annotations) as on the MutatingWebhookConfiguration")
        hooks = {h["name"]: h for h in cfg["webhooks"]}
        eq(sorted(hooks), sorted(EXPECTED_VALIDATING_RULES), "validating webhook names")
        want_client = dict(mutating["webhooks"][0]["clientConfig"])
        want_client["service"] = dict(want_client["service"], path=VALIDATE_PATH)
        for name, h in hooks.items():
            eq(h["rules"], [EXPECTED_VALIDATING_RULES[name]], f"{name} rules")
            eq(h["clientConfig"], want_client, f"{name} clientConfig (the mutating one's, path {VALIDATE_PATH})")
            eq(h["failurePolicy"], v["webhook"]["validation"]["failurePolicy"], f"{name} failurePolicy")
            eq(h["admissionReviewVersions"], ["v1"], f"{name} admissionReviewVersions")
            eq(h["sideEffects"], "None", f"{name} sideEffects")
            eq(h["matchPolicy"], "Equivalent", f"{name} matchPolicy")
            eq(h["timeoutSeconds"], v["webhook"]["timeoutSeconds"], f"{name} timeoutSeconds")
        cms = hooks["validate-policy-configmaps.knativeha.dev"]
        eq(cms.get("namespaceSelector"), {"matchLabels": {"kubernetes.io/metadata.name": ns}},
           "policy ConfigMaps: the release namespace only")
        eq(cms.get("objectSelector"), {"matchLabels": {"knativeha.dev/policy": "true"}},
           "policy ConfigMaps: the labelled ones only")
        haps_hook = hooks["validate-policies.knativeha.dev"]
        expect("namespaceSelector" not in haps_hook and "objectSelector" not in haps_hook,
               "every HighAvailabilityPolicy is validated")
    rep.check(f"{label}: ValidatingWebhookConfiguration (policies and labelled ConfigMaps, POST {VALIDATE_PATH}, "
              "failurePolicy webhook.validation.failurePolicy, TLS as the mutating one)", validating)

    haps = r.of_kind("HighAvailabilityPolicy")
    if v.get("defaultPolicy", {}).get("enabled"):
        def policy():
            eq(len(haps), 1, "HighAvailabilityPolicies")
            hap = haps[0]
            eq(hap["apiVersion"], "knativeha.dev/v1alpha1", "apiVersion")
            eq(hap["metadata"]["name"], v["defaultPolicy"]["name"], "name")
            eq(hap["spec"], v["defaultPolicy"]["spec"], "spec")
            expect(crd_schema is not None, "no CRD schema to validate against (charts/knative-ha-webhook/crds/ missing)")
            jsonschema.validate({k: hap[k] for k in ("spec",)}, {
                "type": "object", "properties": {"spec": crd_schema["properties"]["spec"]}, "required": ["spec"]})
            expect(hap["spec"]["targetNamespace"] in v["governedNamespaces"], "targetNamespace is not governed")
            if KHW_CMD:  # the server's own validation (`knative-ha-webhook check`), stricter than the schema
                with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
                    yaml.safe_dump(hap, f)
                try:
                    res = subprocess.run([*KHW_CMD, "check", f.name], capture_output=True, text=True, check=False)
                finally:
                    os.unlink(f.name)
                expect(res.returncode == 0, f"`knative-ha-webhook check` rejects it: {res.stderr.strip()}")
        rep.check(f"{label}: HighAvailabilityPolicy from values passes the CRD schema and `knative-ha-webhook check`", policy)
    else:
        rep.check(f"{label}: no HighAvailabilityPolicy unless defaultPolicy.enabled",
                  lambda: eq(len(haps), 0, "HighAvailabilityPolicies"))

    sms = r.of_kind("ServiceMonitor")
    if v.get("serviceMonitor", {}).get("enabled") and SERVICE_MONITOR_API in r.api_versions:
        def servicemonitor():
            eq(len(sms), 1, "ServiceMonitors")
            sm = sms[0]
            eq(sm["apiVersion"], "monitoring.coreos.com/v1", "apiVersion")
            eq(sm["spec"]["namespaceSelector"], {"matchNames": [ns]}, "namespaceSelector")
            (msvc,) = r.metrics_services
            expect(selector_matches(sm["spec"]["selector"], msvc["metadata"]["labels"]),
                   "ServiceMonitor selector does not select the metrics Service")
            expect(not selector_matches(sm["spec"]["selector"], r.service["metadata"]["labels"]),
                   "ServiceMonitor selector selects the webhook's own Service")
            ep = sm["spec"]["endpoints"]
            eq(len(ep), 1, "endpoints")
            svc_ports = {p["name"] for p in msvc["spec"]["ports"]}
            expect(ep[0]["port"] in svc_ports, f"endpoint port {ep[0]['port']!r} is not a Service port name")
            eq(ep[0]["path"], "/metrics", "endpoint path")
            eq(ep[0]["interval"], v["serviceMonitor"]["interval"], "interval")
            for k, val in v["serviceMonitor"].get("labels", {}).items():
                eq(sm["metadata"]["labels"].get(k), val, f"label {k}")
        rep.check(f"{label}: ServiceMonitor scrapes the metrics Service's port at /metrics", servicemonitor)
    else:
        rep.check(f"{label}: no ServiceMonitor unless serviceMonitor.enabled and the cluster serves {SERVICE_MONITOR_API}",
                  lambda: eq(len(sms), 0, "ServiceMonitors"))

    rules = r.of_kind("PrometheusRule")
    if v.get("prometheusRule", {}).get("enabled") and PROMETHEUS_RULE_API in r.api_versions:
        rep.check(f"{label}: PrometheusRule alerts use metrics the server registers, scoped to the release namespace",
                  lambda: check_prometheus_rule(rules, ns, v["prometheusRule"], v["reconcile"]))
        rep.check(f"{label}: PrometheusRule alerts on the API server's fail-open and rejection counts of the "
                  "mutating webhook, on reconciler write errors, on a namespace refusing the reconciler, and on drift in a dry run too",
                  lambda: check_outage_alerts(rules[0], r.webhook_config["webhooks"][0]["name"], ns,
                                              v["prometheusRule"], v["reconcile"]))
    else:
        rep.check(f"{label}: no PrometheusRule unless prometheusRule.enabled and the cluster serves {PROMETHEUS_RULE_API}",
                  lambda: eq(len(rules), 0, "PrometheusRules"))


# The Prometheus Operator's APIs: the chart renders its objects only where the cluster serves them.
SERVICE_MONITOR_API = "monitoring.coreos.com/v1/ServiceMonitor"
METRICS_COMPONENT = ("app.kubernetes.io/component", "metrics")
PROMETHEUS_RULE_API = "monitoring.coreos.com/v1/PrometheusRule"
MONITORING_APIS = [SERVICE_MONITOR_API, PROMETHEUS_RULE_API]
# Scenarios rendered as on a cluster lacking some of them (default: both served).
SCENARIO_API_VERSIONS = {
    "monitoring-without-crds": [],
    "monitoring-servicemonitor-crd-only": [SERVICE_MONITOR_API],
}


def scenario_api_versions(label: str) -> list[str]:
    return SCENARIO_API_VERSIONS.get(label, MONITORING_APIS)


# The API server's own admission metrics (labelled name=<webhook name>, no namespace of ours).
FAIL_OPEN_ALERT = "KnativeHAWebhookFailOpen"
REJECTED_ALERT = "KnativeHAWebhookRejected"
WRITE_ERRORS_ALERT = "KnativeHAWebhookReconcileWriteErrors"
FORBIDDEN_ALERT = "KnativeHAWebhookReconcileForbidden"
APISERVER_ALERT_METRICS = {FAIL_OPEN_ALERT: "apiserver_admission_webhook_fail_open_count",
                           REJECTED_ALERT: "apiserver_admission_webhook_rejection_count"}
EXPECTED_ALERTS = {"KnativeHAWebhookNotReady", "KnativeHAWebhookCertificateExpiring",
                   "KnativeHAWebhookPolicyInvalid", "KnativeHAWebhookSourceDown", "KnativeHAWebhookReconcileFailing",
                   FAIL_OPEN_ALERT, REJECTED_ALERT, WRITE_ERRORS_ALERT, FORBIDDEN_ALERT,
                   "KnativeHAWebhookPolicyGovernsNothing"}
# Wherever the drift gauge means something to act on: a dry run reports every drifting object (what
# an operator must hear about), a writing reconciler reports what it could not fix. Not rendered
# when the reconciler writes but leaves pod templates out: their drift persists by design.
DRIFT_ALERT = "KnativeHAWebhookDriftPersists"
# Every alert's runbook: the troubleshooting section of docs/operations.md.
RUNBOOK_SUFFIX = "/docs/operations.md#troubleshooting"


def registered_metrics() -> set[str]:
    """Metric names the server registers (read from its source), with the `_total` prometheus-client adds to counters."""
    src = Path(__file__).resolve().parents[2] / "src"
    names = set()
    for f in src.rglob("*.rs"):
        text = f.read_text()
        names |= set(re.findall(r'"(knative_ha_webhook_[a-z_]+)"', text))
        names |= {f"knative_ha_webhook_{n}" for n in re.findall(r'\bn\("([a-z_]+)"\)', text)}
    return names | {n + "_total" for n in names}


def check_prometheus_rule(rules: list[dict], ns: str, values: dict, reconcile: dict) -> None:
    eq(len(rules), 1, "PrometheusRules")
    rule = rules[0]
    eq(rule["apiVersion"], "monitoring.coreos.com/v1", "apiVersion")
    for k, val in values.get("labels", {}).items():
        eq(rule["metadata"]["labels"].get(k), val, f"label {k}")
    alerts = [a for g in rule["spec"]["groups"] for a in g["rules"]]
    drift = reconcile["enabled"] and (reconcile["dryRun"] or reconcile["podTemplates"])
    eq({a["alert"] for a in alerts}, EXPECTED_ALERTS | ({DRIFT_ALERT} if drift else set()),
       f"alert names (drift alerted on: {drift})")
    known = registered_metrics()
    for a in alerts:
        expect(a.get("annotations", {}).get("runbook_url", "").startswith("https://")
               and a["annotations"]["runbook_url"].endswith(RUNBOOK_SUFFIX),
               f"{a['alert']}: runbook_url does not point at docs/operations.md#troubleshooting: "
               f"{a.get('annotations', {}).get('runbook_url')!r}")
        eq(a["labels"]["severity"], values["severity"], f"{a['alert']} severity")
        expect(a["annotations"].get("summary"), f"{a['alert']}: no summary")
        if a["alert"] in APISERVER_ALERT_METRICS:
            continue  # the API server's metrics: checked by check_outage_alerts
        used = set(re.findall(r"knative_ha_webhook_[a-z_]+", a["expr"]))
        expect(used, f"{a['alert']}: uses no knative_ha_webhook_ metric")
        expect(used <= known, f"{a['alert']}: unknown metrics {sorted(used - known)}")
        expect(f'namespace="{ns}"' in a["expr"], f"{a['alert']}: not scoped to namespace {ns}: {a['expr']}")


def check_outage_alerts(rule: dict, hook: str, ns: str, values: dict, reconcile: dict) -> None:
    """A webhook outage (failurePolicy Ignore admits writes unmutated), a reconciler that cannot write,
    and drift in a dry run are each alerted on: otherwise nothing tells the operator that objects run
    unmutated."""
    alerts = {a["alert"]: a for g in rule["spec"]["groups"] for a in g["rules"]}
    window = values.get("admissionErrorsWindow", "10m")
    for name, metric in APISERVER_ALERT_METRICS.items():
        expect(name in alerts, f"no alert {name} on {metric}")
        a = alerts[name]
        expr = " ".join(a["expr"].split())
        want = f'increase({metric}{{name="{hook}"}}[{window}])'
        expect(want in expr and expr.endswith("> 0"), f"{name}: expr {expr!r} lacks {want!r} ... > 0")
        expect("namespace=" not in expr, f"{name}: the API server's metric has no namespace label of ours: {expr}")
    fo = alerts[FAIL_OPEN_ALERT]["annotations"]
    text = (fo.get("summary", "") + " " + fo.get("description", "")).lower()
    for want in ("unmutated", "reconciler", "failurepolicy"):
        expect(want in text, f"{FAIL_OPEN_ALERT}: summary/description does not say {want!r}: {text}")
    expect(alerts[REJECTED_ALERT]["annotations"].get("description"), f"{REJECTED_ALERT}: no description")
    expect(WRITE_ERRORS_ALERT in alerts, f"no alert {WRITE_ERRORS_ALERT}")
    expr = " ".join(alerts[WRITE_ERRORS_ALERT]["expr"].split())
    for want in ("increase(knative_ha_webhook_reconcile_writes_total{", f'namespace="{ns}"', 'result="error"',
                 f'[{values.get("writeErrorsWindow", "15m")}]', "> 0"):
        expect(want in expr, f"{WRITE_ERRORS_ALERT}: expr {expr!r} lacks {want!r}")
    check_forbidden_alert(alerts, ns)
    if reconcile["enabled"] and reconcile["dryRun"]:
        expect(DRIFT_ALERT in alerts, f"no {DRIFT_ALERT} in a dry run (reconcile.dryRun=true)")
        desc = alerts[DRIFT_ALERT]["annotations"].get("description", "")
        expect("reconcile.dryRun=false" in desc and "audit" in desc,
               f"{DRIFT_ALERT} in a dry run: the description must say how to list (audit) and fix "
               f"(reconcile.dryRun=false) the drift: {desc!r}")


def check_forbidden_alert(alerts: dict, ns: str) -> None:
    """A governed namespace refusing the reconciler (403: the chart's Role there deleted with the
    namespace) was told to nobody: the alert names the namespace and the fix."""
    expect(FORBIDDEN_ALERT in alerts, f"no alert {FORBIDDEN_ALERT}")
    a = alerts[FORBIDDEN_ALERT]
    expr = " ".join(a["expr"].split())
    for want in ("by (target_namespace)", "knative_ha_webhook_reconcile_forbidden{", f'namespace="{ns}"', "> 0"):
        expect(want in expr, f"{FORBIDDEN_ALERT}: expr {expr!r} lacks {want!r}")
    text = a["annotations"].get("summary", "") + " " + a["annotations"].get("description", "")
    for want in ("{{ $labels.target_namespace }}", "ReconcilerForbidden", "helm upgrade"):
        expect(want in text, f"{FORBIDDEN_ALERT}: summary/description does not say {want!r}: {text}")


def check_defaults(r: Rendered, app_version: str) -> None:
    """The defaults themselves (the checks above compare against values, so pin the defaults)."""
    h = r.webhook_config["webhooks"][0]
    eq(h["failurePolicy"], "Ignore", "default failurePolicy")
    eq(h["timeoutSeconds"], 5, "default timeoutSeconds")
    eq(h["reinvocationPolicy"], "IfNeeded", "default reinvocationPolicy")
    # Ignore, as the mutating one: with the last valid version kept across restarts, an invalid
    # policy admitted while the webhook is down does not ungovern its namespace.
    vwc = r.one("ValidatingWebhookConfiguration")
    eq([vh["failurePolicy"] for vh in vwc["webhooks"]], ["Ignore", "Ignore"], "default validation failurePolicy")
    eq(h["namespaceSelector"]["matchExpressions"][0]["values"], ["knative-serving"], "default governed namespaces")
    eq(h["clientConfig"]["service"]["port"], 443, "default Service port")
    eq(r.deployment["spec"]["replicas"], 2, "default replicas")
    args = r.args()
    eq((args["--listen"], args["--metrics-listen"]), ("0.0.0.0:8443", "0.0.0.0:9090"), "default listen addresses")
    eq(args["--on-error"], "allow", "default --on-error")
    env = {e["name"]: e.get("value") for e in r.container.get("env", [])}
    eq((env.get("KHW_RECONCILE"), env.get("KHW_RECONCILE_DRY_RUN"), env.get("KHW_RECONCILE_POD_TEMPLATES")),
       ("true", "false", "true"),
       "reconcile on and writing by default (HA comes back by itself after writes admitted unmutated)")
    eq(env.get("KHW_UNDO_UNCLAIMED"), "false",
       "a deleted policy changes nothing by default (undoWhenPolicyDeleted: false)")
    expect("cert-manager.io/inject-ca-from" in r.webhook_config["metadata"].get("annotations", {}),
           "cert-manager is the default TLS mode")
    eq(r.container["image"], f"{r.values['image']['repository']}:{app_version}", "default image tag = appVersion")
    pr = r.values["prometheusRule"]
    eq((pr.get("admissionErrorsWindow"), pr.get("writeErrorsWindow")), ("10m", "15m"),
       "default alert windows: API server fail-open/rejection counts, reconciler write errors")


# Values whose content is a Kubernetes object or free-form map: documented and typed as a whole.
OPAQUE_VALUES = {"resources", "podSecurityContext", "securityContext", "defaultPolicy.spec", "affinity",
                 "nodeSelector", "commonLabels", "podLabels", "podAnnotations", "serviceAccount.annotations",
                 "webhook.annotations", "service.annotations", "serviceMonitor.labels",
                 "networkPolicy.metricsNamespaceLabels", "prometheusRule.labels"}


def value_paths(d: dict, prefix: str = "") -> set[str]:
    out = set()
    for k, val in d.items():
        path = f"{prefix}{k}"
        out.add(path)
        if isinstance(val, dict) and path not in OPAQUE_VALUES:
            out |= value_paths(val, path + ".")
    return out


def schema_paths(schema: dict, prefix: str = "") -> set[str]:
    out = set()
    for k, sub in schema.get("properties", {}).items():
        path = f"{prefix}{k}"
        out.add(path)
        if path not in OPAQUE_VALUES:
            out |= schema_paths(sub, path + ".")
    return out


def check_values_documented(values_text: str) -> None:
    """Every value in values.yaml has a comment right above it (opaque values: above the value)."""
    lines = values_text.splitlines()
    parsed = yaml.safe_load(values_text)
    stack: list[tuple[int, str]] = []
    undocumented = []
    for i, line in enumerate(lines):
        m = re.match(r"^( *)([A-Za-z][A-Za-z0-9]*):", line)
        if not m:
            continue
        indent = len(m.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        parents = [name for _, name in stack]
        path = ".".join(parents + [m.group(2)])
        stack.append((indent, m.group(2)))
        if any(".".join(parents[: j + 1]) in OPAQUE_VALUES for j in range(len(parents))):
            continue  # inside an opaque value
        value = parsed
        for part in path.split("."):
            value = value[part]
        if isinstance(value, dict) and path not in OPAQUE_VALUES:
            continue  # a group (image:, server:, ...): its children carry the comments
        prev = lines[i - 1].strip() if i else ""
        if not prev.startswith("#"):
            undocumented.append(path)
    expect(not undocumented, f"values without a comment right above them: {undocumented}")


# ---------------------------------------------------------------------------------------------
# Value sets


def deep_merge(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for k, val in over.items():
        if isinstance(val, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], val)
        else:
            out[k] = copy.deepcopy(val)
    return out


def scenarios(ca_bundle: str) -> list[tuple[str, str, str, dict]]:
    """(label, release, namespace, value overrides)."""
    return [
        ("defaults", "khw", "khw-system", {}),
        ("existing-secret", "knative-ha-webhook", "knative-ha-webhook",
         {"certManager": {"enabled": False},
          "tls": {"existingSecret": "knative-ha-webhook-tls", "caBundle": ca_bundle}}),
        ("policy-from-values", "khw", "khw-system", {"defaultPolicy": {"enabled": True}}),
        ("several-namespaces", "khw", "webhooks",
         {"governedNamespaces": ["knative-serving", "kourier-system", "knative-eventing"],
          "reconcile": {"dryRun": False},
          "prometheusRule": {"enabled": True, "severity": "warning", "labels": {}},
          "server": {"shutdownDelay": "1m30s"}, "terminationGracePeriodSeconds": 95,
          "defaultPolicy": {"enabled": True, "name": "kourier",
                            "spec": {"targetNamespace": "kourier-system", "replicas": 2,
                                     "workloads": [{"name": "3scale-kourier-gateway", "replicas": 4}],
                                     "exclude": ["net-kourier-controller"]}}}),
        ("reconcile-off", "khw", "khw-system",
         {"reconcile": {"enabled": False}, "webhook": {"validation": {"enabled": False}}}),
        # Installable before Knative (no object in the governed namespaces).
        ("cluster-rbac", "khw", "khw-system",
         {"rbac": {"scope": "cluster"}, "governedNamespaces": ["knative-serving", "knative-eventing"],
          "reconcile": {"dryRun": False}}),
        # An Operator install: an Operator reinstall deletes the namespace, so nothing goes there.
        ("knative-operator", "khw", "khw-system",
         {"knativeOperator": True, "governedNamespaces": ["knative-serving", "knative-eventing"]}),
        ("cluster-rbac-dry-run", "khw", "khw-system", {"rbac": {"scope": "cluster"}, "reconcile": {"dryRun": True}}),
        ("cluster-rbac-reconcile-off", "khw", "khw-system",
         {"rbac": {"scope": "cluster"}, "reconcile": {"enabled": False}}),
        ("reconcile-dry-run", "khw", "khw-system",
         {"governedNamespaces": ["knative-serving", "kourier-system"],
          "server": {"shutdownDelay": "1500ms"},
          "reconcile": {"dryRun": True, "podTemplates": False, "interval": "5m", "rate": 2.5}}),
        ("service-monitor", "khw", "monitoring-test",
         {"serviceMonitor": {"enabled": True, "interval": "15s", "labels": {"release": "prometheus"}},
          "networkPolicy": {"metricsNamespaceLabels": {"kubernetes.io/metadata.name": "monitoring"}},
          "prometheusRule": {"enabled": True, "severity": "critical", "labels": {"release": "prometheus"}}}),
        # Enabled, but the cluster lacks the Prometheus Operator's CRDs (SCENARIO_API_VERSIONS):
        # nothing rendered for them (an install would fail on `no matches for kind`), NOTES say so.
        ("monitoring-without-crds", "khw", "khw-system",
         {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}, "networkPolicy": {"metricsNamespaceLabels": {"kubernetes.io/metadata.name": "monitoring"}}}),
        ("monitoring-servicemonitor-crd-only", "khw", "khw-system",
         {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}, "networkPolicy": {"metricsNamespaceLabels": {"kubernetes.io/metadata.name": "monitoring"}}}),
        # A writing reconciler that leaves pod templates out: no drift alert (drift persists by
        # design); the alert windows are values.
        ("alerts-no-pod-templates", "khw", "khw-system",
         {"reconcile": {"dryRun": False, "podTemplates": False},
          "prometheusRule": {"enabled": True, "admissionErrorsWindow": "5m", "writeErrorsWindow": "1h"}}),
        ("customised", "edge", "platform",
         {"fullnameOverride": "ha-hook", "replicaCount": 3, "undoWhenPolicyDeleted": True,
          "server": {"port": 9443, "metricsPort": 9191, "shutdownDelay": "20s", "logFormat": "text",
                     "onError": "deny", "extraEnv": [{"name": "RUST_LOG", "value": "debug"}]},
          "terminationGracePeriodSeconds": 45,
          "webhook": {"failurePolicy": "Fail", "timeoutSeconds": 3, "reinvocationPolicy": "Never",
                      "honorSkipLabel": False, "annotations": {"team": "platform"},
                      "validation": {"failurePolicy": "Fail"}},
          "service": {"metricsPort": 8080},
          "commonLabels": {"team": "platform"}, "podLabels": {"tier": "control"},
          "podAnnotations": {"prometheus.io/scrape": "true"},
          "podAntiAffinity": {"type": "hard"}, "topologySpread": {"enabled": False},
          "imagePullSecrets": [{"name": "regcred"}], "priorityClassName": "system-cluster-critical",
          "nodeSelector": {"kubernetes.io/os": "linux"},
          "tolerations": [{"key": "control-plane", "operator": "Exists", "effect": "NoSchedule"}],
          "image": {"repository": "registry.test/khw", "tag": "1.2.3", "pullPolicy": "Always",
                    "digest": "sha256:" + "ab" * 32},
          "serviceAccount": {"annotations": {"example.com/role": "webhook"}}}),
    ]


# Values that must make `helm template` fail, with a fragment of the expected message.
REJECTIONS = [
    ("webhook.timeoutSeconds 30 (max 5)", "khw-system", ["webhook.timeoutSeconds=30"], "timeoutSeconds"),
    ("webhook.timeoutSeconds 0 (min 1)", "khw-system", ["webhook.timeoutSeconds=0"], "timeoutSeconds"),
    ('replicaCount "two"', "khw-system", ["replicaCount=two"], "replicaCount"),
    ("unknown top-level key", "khw-system", ["replicas=3"], "replicas"),
    ("unknown nested key", "khw-system", ["webhook.timeout=3"], "timeout"),
    ("failurePolicy not Ignore/Fail", "khw-system", ["webhook.failurePolicy=Allow"], "failurePolicy"),
    ("validation.failurePolicy not Ignore/Fail", "khw-system", ["webhook.validation.failurePolicy=Allow"],
     "failurePolicy"),
    ("release namespace in governedNamespaces", "knative-serving", [], "must not contain the release namespace"),
    ("release namespace among several governed", "kourier-system",
     ["governedNamespaces={knative-serving,kourier-system}"], "must not contain the release namespace"),
    ("certManager off without existingSecret", "khw-system",
     ["certManager.enabled=false", "tls.caBundle=Cg=="], "tls.existingSecret is required"),
    ("certManager off without caBundle", "khw-system",
     ["certManager.enabled=false", "tls.existingSecret=my-tls"], "tls.caBundle is required"),
    ("caBundle that is not a base64 PEM certificate", "khw-system",
     ["certManager.enabled=false", "tls.existingSecret=my-tls", "tls.caBundle=aGVsbG8="], "PEM"),
    ("terminationGracePeriodSeconds <= shutdownDelay", "khw-system",
     ["terminationGracePeriodSeconds=10"], "must be at least server.shutdownDelay"),
    ("terminationGracePeriodSeconds < shutdownDelay + timeoutSeconds", "khw-system",
     ["terminationGracePeriodSeconds=14"], "+ webhook.timeoutSeconds"),
    ("shutdownDelay not a Go duration", "khw-system", ["server.shutdownDelay=10"], "shutdownDelay"),
    ("shutdownDelay 1m against the default grace period", "khw-system", ["server.shutdownDelay=1m"],
     "must be at least server.shutdownDelay (1m)"),
    ("defaultPolicy.spec with an unknown key (replcas)", "khw-system", ["defaultPolicy.spec.replcas=3"], "'replcas' not allowed"),
    ("defaultPolicy.spec.replicas 300 (max 100)", "khw-system", ["defaultPolicy.spec.replicas=300"], "/defaultPolicy/spec/replicas"),
    ("defaultPolicy.spec.podAntiAffinity.type not an enum value", "khw-system",
     ["defaultPolicy.spec.podAntiAffinity.type=Soft"], "/defaultPolicy/spec/podAntiAffinity/type"),
    ("defaultPolicy targeting an ungoverned namespace", "khw-system",
     ["defaultPolicy.enabled=true", "defaultPolicy.spec.targetNamespace=default"], "not one of governedNamespaces"),
    ("empty governedNamespaces", "khw-system", ["governedNamespaces=null"], "governedNamespaces"),
    ("reconcile.rate 0", "khw-system", ["reconcile.rate=0"], "rate"),
    ("reconcile.interval not a duration", "khw-system", ["reconcile.interval=often"], "interval"),
    ("unknown reconcile key", "khw-system", ["reconcile.writes=3"], "writes"),
    ("undoWhenPolicyDeleted not a boolean", "khw-system", ["undoWhenPolicyDeleted=yes"], "undoWhenPolicyDeleted"),
    ("rbac.scope not namespaced/cluster", "khw-system", ["rbac.scope=everywhere"], "scope"),
]


# ---------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--helm", required=True)
    ap.add_argument("--chart", required=True, type=Path)
    ap.add_argument("--kubernetes-validate", required=True, dest="kv")
    ap.add_argument("--kube-versions", default="1.32.0")
    ap.add_argument("--ca-cert", required=True, type=Path, help="a PEM CA (from certs/generate.sh) for caBundle")
    ap.add_argument("--out", type=Path, help="keep the renderings here")
    ap.add_argument("--khw-cmd", default="", help="command running knative-ha-webhook, e.g. 'cargo run --quiet --'")
    args = ap.parse_args()
    KHW_CMD[:] = shlex.split(args.khw_cmd)

    rep = Report()
    chart = Chart(args.helm, args.chart)
    defaults = deep_merge(yaml.safe_load((args.chart / "values.yaml").read_text()), TEST_IMAGE)
    app_version = str(yaml.safe_load((args.chart / "Chart.yaml").read_text())["appVersion"])
    ca_bundle = base64.b64encode(args.ca_cert.read_bytes()).decode()

    values_text = (args.chart / "values.yaml").read_text()
    rep.check("values.yaml: a comment on every value", lambda: check_values_documented(values_text))

    def schema_covers():
        schema = json.loads((args.chart / "values.schema.json").read_text())
        in_values, in_schema = value_paths(defaults), schema_paths(schema)
        eq(sorted(in_values - in_schema), [], "values missing from values.schema.json")
        eq(sorted(in_schema - in_values), [], "schema properties missing from values.yaml")
        eq(schema.get("additionalProperties"), False, "top-level additionalProperties")
        jsonschema.Draft7Validator.check_schema(schema)
        jsonschema.validate(defaults, schema)
    rep.check("values.schema.json: covers exactly the values in values.yaml; defaults validate", schema_covers)

    def patterns_described():
        schema = json.loads((args.chart / "values.schema.json").read_text())
        bare = []

        def walk(node, path, inherited):
            # A pattern is described on its own node, or on the node whose anyOf/allOf/items holds it.
            if isinstance(node, list):
                for i, sub in enumerate(node):
                    walk(sub, f"{path}/{i}", inherited)
            elif isinstance(node, dict):
                own = "description" in node
                if "pattern" in node and not (own or inherited):
                    bare.append(path)
                for k, sub in node.items():
                    walk(sub, f"{path}/{k}", own if k in ("anyOf", "oneOf", "allOf", "items") else False)
        walk(schema, "", False)
        eq(bare, [], "patterns without a description (on them or the anyOf around them)")
    rep.check("values.schema.json: every pattern has a description", patterns_described)

    def policy_spec_is_the_crds():
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        import policy_schema
        schema = json.loads((args.chart / "values.schema.json").read_text())
        crd = yaml.safe_load(sorted((args.chart / "crds").glob("*.yaml"))[0].read_text())
        eq(schema["definitions"]["policySpec"], policy_schema.policy_spec(crd),
           "definitions.policySpec differs from the CRD's spec schema (regenerate with charts/tests/policy_schema.py)")
    rep.check("values.schema.json: defaultPolicy.spec is checked by the CRD's spec schema (policy_schema.py)",
              policy_spec_is_the_crds)

    def readme_lists_values():
        readme = (args.chart / "README.md").read_text()
        documented = set(re.findall(r"^\| `([A-Za-z][A-Za-z0-9.]*)` \|", readme, re.M))
        leaves = {p for p in value_paths(defaults) if p in OPAQUE_VALUES or not isinstance(
            functools.reduce(lambda d, k: d[k], p.split("."), defaults), dict)}
        eq(sorted(leaves - documented), [], "values missing from the chart README's table")
        eq(sorted(documented - leaves), [], "README table rows for values that do not exist")
    rep.check("chart README.md: the values table lists exactly the values", readme_lists_values)

    crd_schema = None
    crd_files = sorted((args.chart / "crds").glob("*.yaml"))
    if crd_files:
        crd = yaml.safe_load(crd_files[0].read_text())
        crd_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]

    out_dir = args.out or Path(tempfile.mkdtemp(prefix="khw-chart-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    builtin_files = []
    for label, release, ns, over in scenarios(ca_bundle):
        values = deep_merge(defaults, over)
        apis = scenario_api_versions(label)
        res = chart.render(release, ns, values=over, api_versions=apis)
        if res.returncode != 0:
            rep.check(f"{label}: helm template", lambda: expect(False, res.stderr.strip()))
            continue
        rep.check(f"{label}: helm template renders", lambda: None)
        r = Rendered(res.stdout, release, ns, values, apis)
        (out_dir / f"{label}.yaml").write_text(res.stdout)
        builtin = [d for d in r.docs if d["kind"] not in CUSTOM_KINDS]
        unexpected = {d["kind"] for d in r.docs} - CUSTOM_KINDS - {
            "Deployment", "Service", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
            "RoleBinding", "PodDisruptionBudget", "MutatingWebhookConfiguration",
            "ValidatingWebhookConfiguration", "NetworkPolicy"}
        rep.check(f"{label}: only known kinds rendered", lambda: expect(not unexpected, f"unexpected kinds {unexpected}"))
        path = out_dir / f"{label}.builtin.yaml"
        path.write_text(yaml.safe_dump_all(builtin, sort_keys=False))
        builtin_files.append(path)
        check_rendering(r, rep, label, crd_schema)
        if label == "defaults":
            rep.check("defaults: safe and HA out of the box", lambda r=r: check_defaults(r, app_version))

    if crd_files:  # the CRD is a built-in kind: validate it too
        builtin_files.append(crd_files[0])
    for version in args.kube_versions.split(","):
        def validate(version=version):
            res = subprocess.run([args.kv, "-k", version, "--strict", *map(str, builtin_files)],
                                 capture_output=True, text=True, check=False)
            text = (res.stdout + res.stderr).strip()
            expect(res.returncode == 0 and "ERROR" not in text and "WARN" not in text,
                   f"kubernetes-validate rc={res.returncode}:\n{text}")
            expect(text.count("INFO") >= len(builtin_files), f"fewer validations than expected:\n{text}")
        rep.check(f"kubernetes-validate -k {version} --strict: {len(builtin_files)} files (renderings, CRD), built-in kinds",
                  validate)

    if crd_schema is not None:
        def hap_rejected():
            bad = {"spec": {"targetNamespace": "knative-serving", "replicas": "three"}}
            try:
                jsonschema.validate(bad, {"type": "object", "properties": {"spec": crd_schema["properties"]["spec"]}})
            except jsonschema.ValidationError:
                return
            raise AssertionError("the CRD schema accepted replicas: \"three\"")
        rep.check("CRD schema rejects a bad HighAvailabilityPolicy (the policy check can fail)", hap_rejected)

    for name, ns, sets, fragment in REJECTIONS:
        def rejected(ns=ns, sets=sets, fragment=fragment):
            res = chart.render("khw", ns, sets=sets)
            expect(res.returncode != 0, f"helm template succeeded with {sets} in namespace {ns}")
            expect(fragment in res.stderr, f"error does not mention {fragment!r}: {res.stderr.strip()}")
        rep.check(f"rejects {name}", rejected)

    # NOTES.txt is not rendered by `helm template`: render a copy of it as a value of a template.
    notes_chart = Path(tempfile.mkdtemp(prefix="khw-notes-")) / "chart"
    shutil.copytree(args.chart, notes_chart)
    (notes_chart / "notes.txt").write_text((args.chart / "templates" / "NOTES.txt").read_text())
    (notes_chart / "templates" / "notes-check.yaml").write_text(
        'notes: |\n{{ tpl (.Files.Get "notes.txt") . | indent 2 }}\n')
    for label, release, ns, over in scenarios(ca_bundle):
        if label not in ("defaults", "customised", "policy-from-values", "service-monitor",
                         *SCENARIO_API_VERSIONS):
            continue

        def notes(label=label, release=release, ns=ns, over=over):
            apis = scenario_api_versions(label)
            res = Chart(args.helm, notes_chart).render(release, ns, values=over, api_versions=apis)
            expect(res.returncode == 0, res.stderr.strip())
            text = [d for d in load_docs(res.stdout) if "notes" in d][0]["notes"]
            r = Rendered(res.stdout, release, ns, deep_merge(defaults, over), apis)
            deploy = r.deployment["metadata"]["name"]
            mport = listen_port(r.args()["--metrics-listen"])
            governed = r.values["governedNamespaces"][0]
            for want in (f"kubectl -n {ns} get pods -l app.kubernetes.io/instance={release}",
                         f"kubectl -n {governed} create deployment",
                         "kubectl apply --dry-run=server -o yaml",
                         f"kubectl -n {ns} port-forward deploy/{deploy} {mport}:{mport}",
                         f"curl -s localhost:{mport}/metrics",
                         "knativeha.dev/policy"):
                expect(want in text, f"NOTES.txt lacks {want!r}")
            if r.values["reconcile"]["enabled"]:
                # how to leave the default (writing) for a dry run, or the dry run for writing
                flip = "false" if r.values["reconcile"]["dryRun"] else "true"
                want = f"helm upgrade {release} charts/knative-ha-webhook -n {ns} --reuse-values --set reconcile.dryRun={flip}"
                expect(want in text, f"NOTES.txt lacks {want!r}")
            # a deleted policy changes nothing unless undoWhenPolicyDeleted; restore undoes
            want = ("undoWhenPolicyDeleted=true" if r.values["undoWhenPolicyDeleted"]
                    else "knative-ha-webhook restore --namespace NS")
            expect(want in text, f"NOTES.txt lacks {want!r}")
            expect("<chart>" not in text, "NOTES.txt has a <chart> placeholder")
            expect("{{" not in text and "<no value>" not in text, "NOTES.txt has unrendered parts")
            # An enabled ServiceMonitor/PrometheusRule the cluster has no API for is skipped: NOTES say
            # which, why, and how to get it (install the CRDs, then helm upgrade).
            for key, api in (("serviceMonitor", SERVICE_MONITOR_API), ("prometheusRule", PROMETHEUS_RULE_API)):
                skipped = r.values[key]["enabled"] and api not in apis
                if not skipped:
                    expect(api not in text, f"NOTES.txt says {api} is missing although {key} was rendered or disabled")
                    continue
                for want in (f"{key}.enabled=true", api, "Prometheus Operator",
                             f"helm upgrade {release} charts/knative-ha-webhook -n {ns} --reuse-values"):
                    expect(want in text, f"NOTES.txt does not say the {api.rsplit('/', 1)[1]} was skipped: lacks {want!r}")
        rep.check(f"{label}: NOTES.txt shows how to check pods, a server-side dry run and metrics, "
                  "and names a skipped ServiceMonitor/PrometheusRule", notes)
    shutil.rmtree(notes_chart.parent, ignore_errors=True)

    print(f"rendered: {rep.passed} passed, {rep.failed} failed (renderings in {out_dir})")
    return 1 if rep.failed else 0


if __name__ == "__main__":
    sys.exit(main())
