//! HighAvailabilityPolicy resources, watched as dynamic objects so that one
//! invalid object never breaks the stream: each is validated on its own
//! with [`Policy::from_json`].

use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};
use serde_json::{Value, json};

use super::Observed;
use super::merge::{Origin, PolicyObject};
use super::status::ObservedStatus;
use crate::policy::{API_VERSION, HighAvailabilityPolicy, KIND, Policy};

/// `knativeha.dev/v1alpha1` `highavailabilitypolicies` (cluster-scoped).
pub fn api_resource() -> ApiResource {
    ApiResource::erase::<HighAvailabilityPolicy>(&())
}

/// The key the source tracks a resource by: its uid (its name if the API
/// server sent no uid).
pub fn key(obj: &DynamicObject) -> String {
    obj.uid().unwrap_or_else(|| obj.name_any())
}

/// The document handed to [`Policy::from_json`]: what the user wrote
/// (apiVersion, kind, metadata, spec), without the status this source writes.
pub fn policy_document(obj: &DynamicObject) -> Value {
    let metadata = serde_json::to_value(&obj.metadata).unwrap_or_else(|_| json!({}));
    let mut doc = json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
    });
    if let Some(spec) = obj.data.get("spec") {
        doc["spec"] = spec.clone();
    }
    doc
}

/// Validates one resource as the watcher delivered it.
pub fn observe(obj: &DynamicObject) -> Observed {
    let name = obj.name_any();
    let parsed = Policy::from_json(&policy_document(obj))
        .map(|mut p| {
            if p.name.is_empty() {
                p.name = name.clone();
            }
            p
        })
        .map_err(|e| e.to_string());
    Observed {
        object: PolicyObject {
            origin: Origin::Resource,
            uid: key(obj),
            name,
            namespace: None,
            created: obj.metadata.creation_timestamp.as_ref().map(|t| t.0),
            generation: obj.metadata.generation,
            resource_version: obj.resource_version(),
            last_valid: None,
            error: None,
        },
        parsed,
        status: ObservedStatus::from_object(&obj.data),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dynamic(value: Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn valid_resource_parses_and_reads_status() {
        let obj = dynamic(json!({
            "apiVersion": "knativeha.dev/v1alpha1", "kind": "HighAvailabilityPolicy",
            "metadata": {"name": "serving", "uid": "u1", "generation": 2,
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"targetNamespace": "knative-serving", "replicas": 3},
            "status": {"observedGeneration": 1}
        }));
        let o = observe(&obj);
        let p = o.parsed.unwrap();
        assert_eq!(p.name, "serving");
        assert_eq!(p.spec.replicas, Some(3));
        assert_eq!(o.object.uid, "u1");
        assert_eq!(o.object.generation, Some(2));
        assert!(o.object.created.is_some());
        assert_eq!(o.status.observed_generation, Some(1));
    }

    #[test]
    fn unknown_spec_field_is_an_error_not_a_panic() {
        let obj = dynamic(json!({
            "apiVersion": "knativeha.dev/v1alpha1", "kind": "HighAvailabilityPolicy",
            "metadata": {"name": "bad"},
            "spec": {"targetNamespace": "ns", "replicaz": 3}
        }));
        let o = observe(&obj);
        let err = o.parsed.unwrap_err();
        assert!(err.contains("replicaz"), "{err}");
        assert_eq!(o.object.uid, "bad");
    }
}
