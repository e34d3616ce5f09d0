//! `POST /validate`: the validating admission review of policy objects
//! through the router in process (`oneshot`). An invalid
//! HighAvailabilityPolicy or labelled policy ConfigMap is refused with
//! every error `check` reports for it; anything else is allowed.

use crate::support;
use crate::support::cluster::{self, OWN_NS};
use crate::support::router;

use std::io::Write as _;

use axum::body::Body;
use router::Mutate;
use serde_json::{Value, json};

/// An edit client-go would refuse (renew 11s <= 1.2 x retry 10s), plus a
/// replicas value out of bounds: two errors.
const BAD_SPEC: &str = r#"{"targetNamespace": "knative-serving", "replicas": 0,
    "leaderElection": {"renewDeadline": "11s", "retryPeriod": "10s"}}"#;

fn hap(spec: &str) -> Value {
    let mut hap = cluster::hap_with_spec("serving", serde_json::from_str(spec).unwrap());
    hap["metadata"]["uid"] = json!("u-hap");
    hap["metadata"]["generation"] = json!(2);
    hap
}

fn policy_yaml(spec: &str) -> String {
    format!(
        "apiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\nmetadata:\n  name: serving\nspec: {spec}\n"
    )
}

fn configmap(labelled: bool, policy_yaml: &str) -> Value {
    let mut cm = cluster::policy_configmap("ha", policy_yaml);
    if !labelled {
        cm["metadata"].as_object_mut().unwrap().remove("labels");
    }
    cm
}

/// The AdmissionReview the API server sends for `operation` on `object`.
fn review(operation: &str, object: &Value) -> Value {
    let (group, resource, namespace) = match object["kind"].as_str() {
        Some("ConfigMap") => ("", "configmaps", json!(OWN_NS)),
        _ => ("knativeha.dev", "highavailabilitypolicies", Value::Null),
    };
    let version = if group.is_empty() { "v1" } else { "v1alpha1" };
    let (new, old) = match operation {
        "CREATE" => (object.clone(), Value::Null),
        "DELETE" => (Value::Null, object.clone()),
        _ => (object.clone(), object.clone()),
    };
    let mut request = json!({
        "uid": "00000000-0000-0000-0000-0000000000aa",
        "kind": {"group": group, "version": version, "kind": object["kind"]},
        "resource": {"group": group, "version": version, "resource": resource},
        "name": object["metadata"]["name"],
        "operation": operation,
        "userInfo": {"username": "kubernetes-admin"},
        "object": new,
        "oldObject": old,
        "dryRun": false,
    });
    if !namespace.is_null() {
        request["namespace"] = namespace;
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

async fn validate(operation: &str, object: &Value) -> Value {
    let (status, mut body) = Mutate::example()
        .post_to("/validate", &review(operation, object))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["kind"], "AdmissionReview");
    assert_eq!(
        body["response"]["uid"],
        "00000000-0000-0000-0000-0000000000aa"
    );
    body["response"].take()
}

/// What `check` reports for `text` (a policy document or a ConfigMap),
/// each error without the file and document prefix.
fn check_errors(text: &str) -> Vec<String> {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    let prefix = format!("{}: document 1: ", file.path().display());
    let lines = knative_ha_webhook::tools::check::check_files(&[file.path().to_path_buf()]);
    let errors: Vec<String> = lines
        .into_iter()
        .filter_map(|line| match line {
            knative_ha_webhook::tools::check::Line::Error(e) => Some(e),
            _ => None,
        })
        .map(|e| e.strip_prefix(&prefix).unwrap_or(&e).to_string())
        .collect();
    assert!(!errors.is_empty(), "check finds the document invalid");
    errors
}

fn refusal(response: &Value) -> &str {
    assert_eq!(response["allowed"], false, "{response}");
    assert_eq!(response["status"]["code"], 422, "{response}");
    assert_eq!(response["status"]["reason"], "Invalid", "{response}");
    response["status"]["message"].as_str().unwrap()
}

#[tokio::test]
async fn an_invalid_policy_is_refused_with_every_error_check_reports() {
    let object = hap(BAD_SPEC);
    let errors = check_errors(&serde_json::to_string_pretty(&object).unwrap());
    assert!(errors.len() >= 2, "{errors:?}");
    for operation in ["CREATE", "UPDATE"] {
        let response = validate(operation, &object).await;
        let message = refusal(&response);
        assert!(
            message.starts_with("knative-ha-webhook: HighAvailabilityPolicy serving is invalid: "),
            "{message}"
        );
        for error in &errors {
            assert!(
                message.contains(error.as_str()),
                "{operation}: {error:?} in {message}"
            );
        }
        assert!(
            message.contains("spec.leaderElection.renewDeadline"),
            "{message}"
        );
        assert!(message.contains("spec.replicas"), "{message}");
    }
}

#[tokio::test]
async fn a_valid_policy_and_a_delete_are_allowed() {
    let valid = hap(r#"{"targetNamespace": "knative-serving", "replicas": 3}"#);
    for operation in ["CREATE", "UPDATE"] {
        let response = validate(operation, &valid).await;
        assert_eq!(response["allowed"], true, "{response}");
        assert!(response.get("status").is_none(), "{response}");
    }
    // An invalid object can always be deleted.
    let response = validate("DELETE", &hap(BAD_SPEC)).await;
    assert_eq!(response["allowed"], true, "{response}");
}

#[tokio::test]
async fn an_invalid_policy_configmap_is_refused_with_check_messages() {
    let object = configmap(true, &policy_yaml(BAD_SPEC));
    let errors = check_errors(&serde_json::to_string_pretty(&object).unwrap());
    let response = validate("UPDATE", &object).await;
    let message = refusal(&response);
    assert!(
        message.starts_with(&format!(
            "knative-ha-webhook: policy ConfigMap {OWN_NS}/ha is invalid: data.policy.yaml: "
        )),
        "{message}"
    );
    for error in &errors {
        let error = error
            .strip_prefix(&format!("ConfigMap {OWN_NS}/ha: "))
            .unwrap();
        assert!(message.contains(error), "{error:?} in {message}");
    }
    let missing = validate("CREATE", &json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "ha", "namespace": OWN_NS, "labels": {"knativeha.dev/policy": "true"}},
    }))
    .await;
    assert!(refusal(&missing).contains("data.policy.yaml: missing"));
    let bad_yaml = validate("CREATE", &configmap(true, "spec: [unclosed")).await;
    assert!(refusal(&bad_yaml).contains("data.policy.yaml: invalid YAML"));
}

#[tokio::test]
async fn other_configmaps_and_valid_policy_configmaps_are_allowed() {
    let valid = policy_yaml(r#"{targetNamespace: knative-serving, replicas: 3}"#);
    for object in [
        configmap(true, &valid),
        // Not (or no longer) a policy ConfigMap: not the webhook's business.
        configmap(false, &policy_yaml(BAD_SPEC)),
    ] {
        let response = validate("CREATE", &object).await;
        assert_eq!(response["allowed"], true, "{response}");
    }
    // Other kinds are never refused.
    let mut deployment = support::corpus::controller_deployment();
    deployment["spec"]["replicas"] = json!(-1);
    let mut r = review("CREATE", &deployment);
    r["request"]["kind"] = json!({"group": "apps", "version": "v1", "kind": "Deployment"});
    let (_, body) = Mutate::example().post_to("/validate", &r).await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
}

#[tokio::test]
async fn bad_requests_methods_and_metrics_are_as_on_mutate() {
    let mutate = Mutate::example();
    let (status, body) = mutate.post_to("/validate", &json!({"kind": "Pod"})).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("not an AdmissionReview")
    );

    let get = axum::http::Request::get("/validate")
        .body(Body::empty())
        .unwrap();
    let (status, body) = mutate.send(get).await;
    assert_eq!(status, 405, "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("/validate"),
        "{body}"
    );

    let big = axum::http::Request::post("/validate")
        .header("content-length", (8 << 20).to_string())
        .body(Body::empty())
        .unwrap();
    let (status, _) = mutate.send(big).await;
    assert_eq!(status, 413);

    let (status, _) = mutate
        .post_to("/validate", &review("CREATE", &hap(BAD_SPEC)))
        .await;
    assert_eq!(status, 200);
    // A large body is reviewed on the blocking pool, with the same answer.
    let mut large = hap(BAD_SPEC);
    large["metadata"]["annotations"] = json!({"note": "x".repeat(300 * 1024)});
    let (status, body) = mutate.post_to("/validate", &review("UPDATE", &large)).await;
    assert_eq!(status, 200);
    assert!(
        refusal(&body["response"]).contains("spec.replicas"),
        "{body}"
    );
    let valid = hap(r#"{"targetNamespace": "knative-serving"}"#);
    let (status, _) = mutate.post_to("/validate", &review("UPDATE", &valid)).await;
    assert_eq!(status, 200);
    let text = mutate.metrics_text();
    for line in [
        r#"knative_ha_webhook_requests_total{kind="HighAvailabilityPolicy",operation="CREATE",outcome="refused"} 1"#,
        r#"knative_ha_webhook_requests_total{kind="HighAvailabilityPolicy",operation="UPDATE",outcome="refused"} 1"#,
        r#"knative_ha_webhook_requests_total{kind="HighAvailabilityPolicy",operation="UPDATE",outcome="accepted"} 1"#,
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
    }
}

/// A valid policy that reaches beyond Knative (a namespace of the cluster
/// itself, a PriorityClass kept for the cluster's critical pods) is
/// admitted, with a warning for each that `kubectl` prints; `check` says the
/// same.
#[tokio::test]
async fn a_policy_reaching_into_the_cluster_itself_is_admitted_with_warnings() {
    let spec = r#"{"targetNamespace": "kube-system", "replicas": 3,
        "priorityClassName": "system-node-critical"}"#;
    let response = validate("CREATE", &hap(spec)).await;
    assert_eq!(response["allowed"], true, "{response}");
    let warnings: Vec<&str> = response["warnings"]
        .as_array()
        .map(|w| w.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert_eq!(warnings.len(), 2, "{response}");
    assert!(
        warnings[0].contains("spec.targetNamespace: \"kube-system\""),
        "{warnings:?}"
    );
    assert!(warnings[1].contains("system-node-critical"), "{warnings:?}");
    let plain = validate(
        "CREATE",
        &hap(r#"{"targetNamespace": "knative-serving", "replicas": 3}"#),
    )
    .await;
    assert!(
        plain
            .get("warnings")
            .is_none_or(|w| w.as_array().is_some_and(|a| a.is_empty())),
        "{plain}"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.yaml");
    std::fs::write(&file, policy_yaml(spec)).unwrap();
    let out = support::run(&["check", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", support::stderr(&out));
    let stderr = support::stderr(&out);
    assert!(
        stderr.contains("warning: spec.targetNamespace: \"kube-system\""),
        "{stderr}"
    );
    assert!(
        stderr.contains("warning: spec.priorityClassName: \"system-node-critical\""),
        "{stderr}"
    );
}
