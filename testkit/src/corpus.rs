//! The test data of the tests, the engine benchmark and the fuzz targets
//! (the one fixture loader): the objects of the real Knative v1.23.0
//! manifests, synthetic large ConfigMaps, the kind -> group/version/resource
//! table and the one AdmissionReview builder.
#![allow(dead_code)]

use std::collections::BTreeSet;

use knative_ha_webhook::engine::Snapshot;
use knative_ha_webhook::policy::Policy;
use serde_json::{Value, json};

pub const SERVING_CORE: &str =
    include_str!("../../tests/fixtures/knative-v1.23.0/2-serving-core.yaml");
pub const SERVING_HPA: &str =
    include_str!("../../tests/fixtures/knative-v1.23.0/3-serving-hpa.yaml");
pub const NET_KOURIER: &str = include_str!("../../tests/fixtures/knative-v1.23.0/net-kourier.yaml");
pub const POLICY_YAML: &str = include_str!("../../examples/policy.yaml");

/// The namespace `examples/policy.yaml` governs.
pub const GOVERNED: &str = "knative-serving";
/// A namespace no policy governs.
pub const UNGOVERNED: &str = "default";

/// The Deployments the HPAs of `2-serving-core.yaml` scale.
pub fn hpa_targets() -> BTreeSet<String> {
    BTreeSet::from(["activator".to_string(), "webhook".to_string()])
}

/// A snapshot where `policy` governs its namespace, and [`GOVERNED`]'s
/// [`hpa_targets`] have an HPA (as the manifests' HPAs say).
pub fn governing(policy: &Policy) -> Snapshot {
    Snapshot::from_policies([policy.clone()]).knowing(GOVERNED, hpa_targets(), None)
}

/// The three manifests, repository-relative (for the CLI tests' arguments).
pub const FIXTURES: &[&str] = &[
    "tests/fixtures/knative-v1.23.0/2-serving-core.yaml",
    "tests/fixtures/knative-v1.23.0/3-serving-hpa.yaml",
    "tests/fixtures/knative-v1.23.0/net-kourier.yaml",
];

/// Every document of the three manifests, in file order.
pub fn manifest_documents() -> Vec<Value> {
    static CACHE: std::sync::OnceLock<Vec<Value>> = std::sync::OnceLock::new();
    CACHE
        .get_or_init(|| {
            let mut docs = Vec::new();
            for text in [SERVING_CORE, SERVING_HPA, NET_KOURIER] {
                let parsed: Vec<Value> =
                    serde_saphyr::from_multiple(text).expect("the Knative fixtures are valid YAML");
                docs.extend(parsed.into_iter().filter(Value::is_object));
            }
            docs
        })
        .clone()
}

/// Every Kubernetes object of the three manifests, in file order.
pub fn fixture_objects() -> Vec<Value> {
    manifest_documents()
}

/// The fixture object with this kind, namespace and name.
pub fn fixture(kind: &str, namespace: &str, name: &str) -> Value {
    manifest_documents()
        .into_iter()
        .find(|o| {
            o["kind"] == kind
                && o["metadata"]["namespace"] == namespace
                && o["metadata"]["name"] == name
        })
        .unwrap_or_else(|| panic!("no fixture {kind} {namespace}/{name}"))
}

/// `kind/name` of a manifest object, lower-case kind (`deployment/activator`).
pub fn label(obj: &Value) -> String {
    format!(
        "{}/{}",
        obj["kind"].as_str().unwrap_or("?").to_ascii_lowercase(),
        obj["metadata"]["name"].as_str().unwrap_or("?")
    )
}

/// Every Deployment, ConfigMap, HPA and PDB the manifests put in the
/// governed namespace (what the API server sends the webhook on
/// `kubectl apply` of a release), labelled `kind/name`.
pub fn governed_objects() -> Vec<(String, Value)> {
    manifest_documents()
        .into_iter()
        .filter(|d| {
            d["metadata"]["namespace"] == GOVERNED
                && knative_ha_webhook::engine::kinds::named(d["kind"].as_str().unwrap_or(""))
                    .is_some_and(|k| k.listed)
        })
        .map(|d| (label(&d), d))
        .collect()
}

/// A ConfigMap in `namespace` whose `data` holds about `bytes` bytes
/// (1 KiB values).
pub fn big_configmap(namespace: &str, name: &str, bytes: usize) -> Value {
    let mut data = serde_json::Map::new();
    let value: String = "x".repeat(1024);
    for i in 0..bytes.div_ceil(1024) {
        data.insert(format!("key-{i:05}"), Value::String(value.clone()));
    }
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "bench"}},
        "data": data,
    })
}

/// `obj` moved to `namespace`.
pub fn in_namespace(obj: &Value, namespace: &str) -> Value {
    let mut obj = obj.clone();
    obj["metadata"]["namespace"] = Value::String(namespace.to_string());
    obj
}

/// group, version, resource of a kind the webhook and the fake API server
/// handle: the governed kinds as the engine declares them
/// (`engine::kinds::KINDS`), and the others the tests serve.
pub fn gvr(kind: &str) -> (&'static str, &'static str, &'static str) {
    if let Some(k) = knative_ha_webhook::engine::kinds::named(kind).filter(|k| k.listed) {
        return (k.group, k.version, k.plural);
    }
    match kind {
        "Lease" => ("coordination.k8s.io", "v1", "leases"),
        "HighAvailabilityPolicy" => ("knativeha.dev", "v1alpha1", "highavailabilitypolicies"),
        _ => ("", "v1", "unknown"),
    }
}

/// The objects of the manifests (both namespaces) the reconciler and
/// `audit` look at: every Deployment, HPA and PDB and the
/// `config-leader-election` ConfigMap, each with its (group, plural), in
/// file order (what the tests load into the fake API server).
pub fn reconciled_objects() -> Vec<((&'static str, &'static str), Value)> {
    manifest_documents()
        .into_iter()
        .filter(|o| match o["kind"].as_str() {
            Some("ConfigMap") => o["metadata"]["name"] == "config-leader-election",
            Some(kind) => knative_ha_webhook::engine::kinds::named(kind).is_some_and(|k| k.listed),
            None => false,
        })
        .map(|o| (group_plural(o["kind"].as_str().unwrap_or("")), o))
        .collect()
}

/// (group, plural) of a kind: how the fake API server names a resource.
pub fn group_plural(kind: &str) -> (&'static str, &'static str) {
    let (group, _, plural) = gvr(kind);
    (group, plural)
}

/// An `admission.k8s.io/v1` AdmissionReview as the API server sends it for
/// `operation` (`CREATE`/`UPDATE`/...) of `object` in `namespace`.
pub fn review(uid: &str, operation: &str, namespace: &str, object: &Value) -> Value {
    let kind = object["kind"].as_str().unwrap_or("ConfigMap");
    let (group, version, resource) = gvr(kind);
    let mut object = in_namespace(object, namespace);
    let name = object["metadata"]["name"].clone();
    let old = if operation == "UPDATE" {
        object.clone()
    } else {
        Value::Null
    };
    if operation == "DELETE" {
        object = Value::Null;
    }
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource},
            "requestKind": {"group": group, "version": version, "kind": kind},
            "requestResource": {"group": group, "version": version, "resource": resource},
            "name": name,
            "namespace": namespace,
            "operation": operation,
            "userInfo": {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]},
            "object": object,
            "oldObject": old,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions", "fieldManager": "kubectl-client-side-apply"},
        }
    })
}

/// The members of `AdmissionRequest` in the order the API server writes
/// them (Go's field order in `k8s.io/api/admission/v1`).
const REQUEST_ORDER: &[&str] = &[
    "uid",
    "kind",
    "resource",
    "subResource",
    "requestKind",
    "requestResource",
    "requestSubResource",
    "name",
    "namespace",
    "operation",
    "userInfo",
    "object",
    "oldObject",
    "dryRun",
    "options",
];

/// The bytes of an AdmissionReview with `request`'s members in the API
/// server's order (others after them), as a real review comes: the
/// operation and namespace before the object. (`serde_json::to_vec` of a
/// `Value` sorts the keys, which puts `object` before `operation`; the
/// review path then reads the object another way.)
pub fn api_order(review: &Value) -> Vec<u8> {
    let (Some(top), Some(Value::Object(request))) = (review.as_object(), review.get("request"))
    else {
        return serde_json::to_vec(review).expect("serialisable");
    };
    let rank = |k: &str| {
        REQUEST_ORDER
            .iter()
            .position(|o| *o == k)
            .unwrap_or(REQUEST_ORDER.len())
    };
    let mut members: Vec<_> = request.iter().collect();
    members.sort_by_key(|(k, _)| rank(k));
    let mut out = vec![b'{'];
    for (i, (key, value)) in top.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        serde_json::to_writer(&mut out, key).expect("serialisable");
        out.push(b':');
        if key != "request" {
            serde_json::to_writer(&mut out, value).expect("serialisable");
            continue;
        }
        out.push(b'{');
        for (j, (k, v)) in members.iter().enumerate() {
            if j > 0 {
                out.push(b',');
            }
            serde_json::to_writer(&mut out, k).expect("serialisable");
            out.push(b':');
            serde_json::to_writer(&mut out, v).expect("serialisable");
        }
        out.push(b'}');
    }
    out.push(b'}');
    out
}

/// The real review the load script sends: CREATE of the v1.23.0
/// `controller` Deployment.
pub fn controller_deployment() -> Value {
    governed_objects()
        .into_iter()
        .find(|(l, _)| l == "deployment/controller")
        .map(|(_, v)| v)
        .expect("the controller Deployment is in 2-serving-core.yaml")
}
