//! Policy ConfigMaps: label `knativeha.dev/policy: "true"` in the webhook's
//! namespace, one policy document under the data key `policy.yaml`.

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::ResourceExt;

use super::Observed;
use super::merge::{Origin, PolicyObject};
use super::status::ObservedStatus;
use crate::policy::Policy;

/// The label that marks a policy ConfigMap.
pub const LABEL_SELECTOR: &str = "knativeha.dev/policy=true";
/// The data key holding the policy document.
pub const DATA_KEY: &str = crate::policy::wrapped::DATA_KEY;

/// The key the source tracks a ConfigMap by (uid, or namespace/name).
pub fn key(cm: &ConfigMap) -> String {
    cm.uid()
        .unwrap_or_else(|| format!("{}/{}", cm.namespace().unwrap_or_default(), cm.name_any()))
}

/// Parses and validates the policy of one ConfigMap.
pub fn parse(cm: &ConfigMap) -> Result<Policy, String> {
    let text = cm
        .data
        .as_ref()
        .and_then(|d| d.get(DATA_KEY))
        .ok_or_else(|| format!("data.{DATA_KEY}: missing (the policy document goes there)"))?;
    let mut policy = Policy::from_yaml(text).map_err(|e| format!("data.{DATA_KEY}: {e}"))?;
    if policy.name.is_empty() {
        policy.name = cm.name_any();
    }
    Ok(policy)
}

/// Validates one ConfigMap as the watcher delivered it.
pub fn observe(cm: &ConfigMap) -> Observed {
    Observed {
        object: PolicyObject {
            origin: Origin::ConfigMap,
            uid: key(cm),
            name: cm.name_any(),
            namespace: cm.namespace(),
            created: cm.metadata.creation_timestamp.as_ref().map(|t| t.0),
            generation: cm.metadata.generation,
            resource_version: cm.resource_version(),
            last_valid: None,
            error: None,
        },
        parsed: parse(cm),
        status: ObservedStatus::default(),
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
        let err = parse(&cm(json!({"other": "x"}))).unwrap_err();
        assert!(err.starts_with("data.policy.yaml: missing"), "{err}");
    }

    #[test]
    fn bad_document_error_names_the_key() {
        let err = parse(&cm(json!({"policy.yaml": "spec: [unclosed"}))).unwrap_err();
        assert!(err.starts_with("data.policy.yaml: "), "{err}");
    }
}
