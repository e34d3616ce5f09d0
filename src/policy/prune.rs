//! Every error of a policy document in one pass, for `check`: the
//! structural errors ([`super::schema_check`]) are reported and the fields
//! they name (unknown fields, wrong types) taken out, then the value rules
//! ([`super::validate`]) run over what is left, so a typo in one field does
//! not hide an out-of-range value in another.

use serde_json::Value;

use super::{HighAvailabilityPolicy, Path, Policy, PolicyError, schema_check};

/// Checks one policy document and returns every error: structural ones
/// first, then the value rules over the rest (skipping paths that already
/// have an error). `Ok` only when there is none.
pub fn check_all(document: &Value) -> Result<Policy, Vec<PolicyError>> {
    let mut pruned = document.clone();
    let mut errors = schema_check::check_document(&mut pruned);
    if let Some(obj) = pruned.as_object_mut() {
        obj.remove("status");
    }
    let semantic = match serde_json::from_value::<HighAvailabilityPolicy>(pruned) {
        Ok(res) => match Policy::from_resource(&res) {
            Ok(policy) if errors.is_empty() => return Ok(policy),
            Ok(_) => Vec::new(),
            Err(e) => e.flatten(),
        },
        // Whatever stops decoding (a required field missing or of the
        // wrong type) is a structural error already reported.
        Err(e) if errors.is_empty() => vec![PolicyError::Parse(e.to_string())],
        Err(_) => Vec::new(),
    };
    let reported: Vec<Path> = errors.iter().filter_map(path_of).cloned().collect();
    for e in semantic {
        if !path_of(&e).is_some_and(|p| reported.iter().any(|r| p.0.starts_with(&r.0))) {
            errors.push(e);
        }
    }
    Err(errors)
}

fn path_of(e: &PolicyError) -> Option<&Path> {
    match e {
        PolicyError::Invalid { path, .. } => Some(path),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(spec: Value) -> Value {
        json!({
            "apiVersion": "knativeha.dev/v1alpha1",
            "kind": "HighAvailabilityPolicy",
            "metadata": {"name": "serving"},
            "spec": spec,
        })
    }

    #[test]
    fn a_typo_does_not_hide_a_bad_value() {
        let errors = check_all(&doc(json!({
            "targetNamespace": "knative-serving",
            "replicas": 300,
            "workloads": [{"name": "controller", "replcas": 2}],
        })))
        .unwrap_err();
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert!(
            text.iter()
                .any(|t| t.starts_with("spec.workloads[0].replcas: unknown field")),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|t| t == "spec.replicas: must be between 1 and 100, got 300"),
            "{text:?}"
        );
        assert_eq!(text.len(), 2, "{text:?}");
    }

    #[test]
    fn a_wrong_type_is_reported_once_and_other_values_still_checked() {
        let errors = check_all(&doc(json!({
            "targetNamespace": "knative-serving",
            "replicas": "three",
            "leaderElection": {"buckets": 12},
        })))
        .unwrap_err();
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert!(
            text.iter()
                .any(|t| t.starts_with("spec.replicas: must be an integer")),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|t| t.contains("spec.leaderElection.buckets")),
            "{text:?}"
        );
        assert_eq!(text.len(), 2, "{text:?}");
    }

    #[test]
    fn a_valid_document_passes() {
        let p = check_all(&doc(
            json!({"targetNamespace": "knative-serving", "replicas": 3}),
        ))
        .unwrap();
        assert_eq!(p.spec.replicas, Some(3));
    }
}
