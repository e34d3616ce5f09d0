//! Policy ConfigMaps: label `knativeha.dev/policy: "true"` in the webhook's
//! namespace, one policy document under the data key `policy.yaml`.
//!
//! The last valid version is recorded in the annotation
//! [`LAST_VALID_ANNOTATION`] (`{"name": ..., "spec": ...}`, compact JSON,
//! written by the webhook whenever the current document is valid) and read
//! back when the current document is invalid, so a restarted webhook keeps
//! applying it.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::ResourceExt;
use serde_json::{Value, json};

use super::merge::{Origin, PolicyObject};
use super::policies::{named, read_back};
use super::status::{LastValid, ObservedStatus};
use super::{Invalid, Observed};
use crate::policy::Policy;
use crate::policy::objects::configmap_document;

/// The annotation holding the last valid version of a policy ConfigMap.
pub const LAST_VALID_ANNOTATION: &str = "knativeha.dev/last-valid-policy";

/// The label that marks a policy ConfigMap.
pub const LABEL_SELECTOR: &str = "knativeha.dev/policy=true";
/// The data key holding the policy document.
pub use crate::policy::objects::DATA_KEY;

/// The key the source tracks a ConfigMap by (uid, or namespace/name).
pub fn key(cm: &ConfigMap) -> String {
    cm.uid()
        .unwrap_or_else(|| format!("{}/{}", cm.namespace().unwrap_or_default(), cm.name_any()))
}

/// Parses and validates the policy of one ConfigMap, its document read as
/// `check` and `/validate` read it ([`configmap_document`]).
pub fn parse(cm: &ConfigMap) -> Result<Policy, Invalid> {
    policy_of(cm, &document(cm)?)
}

/// The policy document of `cm` ([`configmap_document`]).
fn document(cm: &ConfigMap) -> Result<Value, Invalid> {
    configmap_document(&json!({"data": cm.data})).map_err(Invalid::Unreadable)
}

/// The policy of `cm`'s `document`, named after `cm` when it names none.
fn policy_of(cm: &ConfigMap, document: &Value) -> Result<Policy, Invalid> {
    named(Policy::from_json(document), &cm.name_any()).map_err(Invalid::Document)
}

/// The record in [`LAST_VALID_ANNOTATION`], if any and readable.
pub fn recorded_annotation(cm: &ConfigMap) -> Option<LastValid> {
    let text = cm.annotations().get(LAST_VALID_ANNOTATION)?;
    let value: Value = serde_json::from_str(text).ok()?;
    Some(LastValid {
        generation: None,
        name: Some(value.get("name")?.as_str()?.to_string()),
        spec: value.get("spec").filter(|s| s.is_object())?.clone(),
    })
}

/// The annotation value of a record.
pub fn annotation(record: &LastValid) -> String {
    json!({"name": record.name, "spec": record.spec}).to_string()
}

/// Validates one ConfigMap as the watcher delivered it; when its document
/// is invalid, the recorded last valid version is read back.
pub fn observe(cm: &ConfigMap) -> Observed {
    let record = recorded_annotation(cm);
    let document = document(cm);
    let target = document
        .as_ref()
        .ok()
        .and_then(crate::policy::written_target);
    let parsed = document.and_then(|d| policy_of(cm, &d));
    let name = record
        .as_ref()
        .and_then(|r| r.name.clone())
        .unwrap_or_default();
    let (parsed, read) = read_back(parsed, record.as_ref(), &name, |current, why| {
        Invalid::AnnotationRecord { current, why }
    });
    let (last_valid, last_valid_refusal) =
        read.map_or((None, None), |r| (Some(Arc::new(r.policy)), r.refusal));
    Observed {
        object: PolicyObject {
            origin: Origin::ConfigMap,
            uid: key(cm),
            name: cm.name_any(),
            namespace: cm.namespace(),
            created: cm.metadata.creation_timestamp.as_ref().map(|t| t.0),
            generation: cm.metadata.generation,
            resource_version: cm.resource_version(),
            last_valid,
            last_valid_generation: None,
            last_valid_refusal,
            error: None,
            target,
        },
        parsed,
        status: ObservedStatus {
            last_valid: record,
            ..ObservedStatus::default()
        },
    }
}

/// The reference an Event about this ConfigMap points at.
pub fn reference(obj: &PolicyObject) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        name: Some(obj.name.clone()),
        namespace: obj.namespace.clone(),
        uid: Some(obj.uid.clone()),
        resource_version: obj.resource_version.clone(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm(data: serde_json::Value) -> ConfigMap {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "ha", "namespace": "khw", "uid": "c1"},
            "data": data,
        }))
        .unwrap()
    }

    #[test]
    fn policy_yaml_is_parsed() {
        let p = parse(&cm(json!({"policy.yaml":
            "apiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\nmetadata: {name: serving}\nspec: {targetNamespace: knative-serving, replicas: 2}\n"})))
        .unwrap();
        assert_eq!(p.spec.target_namespace, "knative-serving");
        assert_eq!(p.name, "serving");
    }

    #[test]
    fn missing_key_names_the_key() {
        let err = parse(&cm(json!({"other": "x"}))).unwrap_err().to_string();
        assert!(err.starts_with("data.policy.yaml: missing"), "{err}");
    }

    #[test]
    fn an_invalid_document_reads_back_the_recorded_version() {
        let mut configmap = cm(json!({"policy.yaml": "spec: [unclosed"}));
        let record = LastValid {
            generation: None,
            name: Some("serving".into()),
            spec: json!({"targetNamespace": "knative-serving", "replicas": 4}),
        };
        configmap.metadata.annotations =
            Some([(LAST_VALID_ANNOTATION.to_string(), annotation(&record))].into());
        let o = observe(&configmap);
        assert!(o.parsed.is_err());
        let kept = o.object.last_valid.expect("the record is read back");
        assert_eq!(
            (kept.name.as_str(), kept.spec.replicas),
            ("serving", Some(4))
        );
        assert_eq!(o.status.last_valid, Some(record));
    }

    #[test]
    fn bad_document_error_names_the_key() {
        let err = parse(&cm(json!({"policy.yaml": "spec: [unclosed"})))
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("data.policy.yaml: "), "{err}");
    }

    /// An invalid document still claims the namespace it names (the
    /// document is read once for both); one that cannot be read claims none.
    #[test]
    fn an_invalid_document_claims_its_target_namespace() {
        let o = observe(&cm(json!({"policy.yaml":
            "kind: HighAvailabilityPolicy\nspec: {targetNamespace: knative-serving, replicas: 0}\n"})));
        assert!(o.parsed.is_err());
        assert_eq!(o.object.target.as_deref(), Some("knative-serving"));
        let o = observe(&cm(json!({"policy.yaml": "spec: [unclosed"})));
        assert_eq!(o.object.target, None);
    }

    /// The status message of a policy ConfigMap and `/validate`'s refusal
    /// of it name the same errors (the status in one line): the document
    /// is read one way.
    #[test]
    fn the_status_says_what_validate_says() {
        for data in [
            json!({"other": "x"}),
            json!({"policy.yaml": "spec: [unclosed"}),
            json!({"policy.yaml": "kind: HighAvailabilityPolicy\nspec: {replicas: 0}\n"}),
        ] {
            let status = parse(&cm(data.clone())).unwrap_err().to_string();
            let refused: Vec<String> =
                crate::policy::objects::check_configmap_data(&json!({"data": data}))
                    .unwrap_err()
                    .iter()
                    .map(|line| line.replacen("data.policy.yaml: ", "", 1))
                    .collect();
            assert_eq!(status, format!("data.policy.yaml: {}", refused.join("; ")));
        }
    }

    #[test]
    fn an_unreadable_record_of_a_configmap_without_its_document_says_both() {
        let mut configmap = cm(json!({"other": "x"}));
        let missing = parse(&configmap).unwrap_err();
        assert!(matches!(&missing, Invalid::Unreadable(_)), "{missing:?}");
        let record = LastValid {
            generation: None,
            name: Some("serving".into()),
            spec: json!({"targetNamespace": "knative-serving", "replicas": "four"}),
        };
        configmap.metadata.annotations =
            Some([(LAST_VALID_ANNOTATION.to_string(), annotation(&record))].into());
        let o = observe(&configmap);
        assert!(o.object.last_valid.is_none());
        let err = o.parsed.unwrap_err();
        let Invalid::AnnotationRecord { current, why } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(**current, missing);
        assert_eq!(
            err.to_string(),
            format!(
                "data.policy.yaml: missing (the policy document goes there) (the last valid \
                 version recorded in annotation knativeha.dev/last-valid-policy cannot be \
                 read back by this release, so it is not applied: {why})"
            )
        );
        assert!(why.to_string().contains("spec.replicas"), "{why}");
    }
}
