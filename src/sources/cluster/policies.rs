//! HighAvailabilityPolicy resources, watched as dynamic objects so that one
//! invalid object never breaks the stream: each is validated on its own
//! with [`Policy::from_json`]. When the current spec is invalid, the last
//! valid one recorded in `status.lastValidSpec` (by this or an earlier
//! process) is read back as the object's last valid version.

use std::sync::Arc;

use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};
use serde_json::{Value, json};

use super::merge::{Origin, PolicyObject};
use super::status::{LastValid, ObservedStatus};
use super::{Invalid, Observed};
use crate::policy::recorded::{Recorded, recorded};
use crate::policy::{API_VERSION, HighAvailabilityPolicy, KIND, Policy, PolicyError};

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

/// What the message of an invalid object says of a recorded last valid
/// version that cannot be read back.
pub(crate) const NOT_APPLIED: &str = "cannot be read back by this release, so it is not applied";

/// Validates one resource as the watcher delivered it; when its spec is
/// invalid, the recorded last valid version is read back (`read_back`).
pub fn observe(obj: &DynamicObject) -> Observed {
    let name = obj.name_any();
    let status = ObservedStatus::from_object(&obj.data);
    let parsed = named(Policy::from_json(&policy_document(obj)), &name).map_err(Invalid::Policy);
    let record = status.last_valid.as_ref();
    let recorded_generation = record.and_then(|r| r.generation);
    let (parsed, read) = read_back(parsed, record, &name, |current, why| {
        Invalid::StatusRecord {
            current,
            generation: recorded_generation,
            why,
        }
    });
    let last_valid_generation = match (&parsed, &read) {
        (Ok(_), _) => obj.metadata.generation,
        (Err(_), read) => read.as_ref().and(recorded_generation),
    };
    let (last_valid, last_valid_refusal) =
        read.map_or((None, None), |r| (Some(Arc::new(r.policy)), r.refusal));
    let object = PolicyObject {
        origin: Origin::Resource,
        uid: key(obj),
        name,
        namespace: None,
        created: obj.metadata.creation_timestamp.as_ref().map(|t| t.0),
        generation: obj.metadata.generation,
        resource_version: obj.resource_version(),
        last_valid,
        last_valid_generation,
        last_valid_refusal,
        error: None,
        target: crate::policy::written_target(&obj.data),
    };
    Observed {
        object,
        parsed,
        status,
    }
}

/// `policy`, named `name` when it names itself nothing.
pub(super) fn named<E>(policy: Result<Policy, E>, name: &str) -> Result<Policy, E> {
    policy.map(|mut p| {
        if p.name.is_empty() {
            p.name = name.to_string();
        }
        p
    })
}

/// `parsed`, and when it is invalid, the last valid version read back from
/// `record` ([`recorded`]: without the settings this release refuses); a
/// record that cannot be read back either makes the error `unreadable`.
pub(super) fn read_back(
    parsed: Result<Policy, Invalid>,
    record: Option<&LastValid>,
    name: &str,
    unreadable: impl FnOnce(Box<Invalid>, PolicyError) -> Invalid,
) -> (Result<Policy, Invalid>, Option<Recorded>) {
    match (parsed, record) {
        (Err(current), Some(r)) => match recorded(name, &r.spec) {
            Ok(read) => (Err(current), Some(read)),
            Err(why) => (Err(unreadable(Box::new(current), why)), None),
        },
        (parsed, _) => (parsed, None),
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
    fn an_invalid_spec_reads_back_the_recorded_last_valid_one() {
        let mut value = json!({
            "apiVersion": "knativeha.dev/v1alpha1", "kind": "HighAvailabilityPolicy",
            "metadata": {"name": "serving", "uid": "u1", "generation": 5},
            "spec": {"targetNamespace": "knative-serving", "replicas": 4,
                     "leaderElection": {"renewDeadline": "11s", "retryPeriod": "10s"}},
            "status": {"lastValidGeneration": 3,
                       "lastValidSpec": {"targetNamespace": "knative-serving", "replicas": 4}}
        });
        let o = observe(&dynamic(value.clone()));
        assert!(o.parsed.unwrap_err().to_string().contains("renewDeadline"));
        let kept = o.object.last_valid.expect("the record is read back");
        assert_eq!(
            (kept.name.as_str(), kept.spec.replicas),
            ("serving", Some(4))
        );
        assert_eq!(o.object.last_valid_generation, Some(3));
        // A record with a value this release refuses (a rule the recording
        // release did not have) still applies, without the refused setting,
        // and its errors are kept for status.
        value["status"]["lastValidSpec"]["replicas"] = json!(0);
        value["status"]["lastValidSpec"]["exclude"] = json!(["autoscaler-hpa"]);
        let o = observe(&dynamic(value.clone()));
        let kept = o
            .object
            .last_valid
            .expect("the refused record still applies");
        assert_eq!(kept.spec.replicas, None, "the refused setting is left out");
        assert_eq!(kept.spec.exclude, ["autoscaler-hpa"], "the rest applies");
        assert_eq!(o.object.last_valid_generation, Some(3));
        let refusal = o.object.last_valid_refusal.expect("the refusal is kept");
        assert_eq!(
            refusal.errors,
            ["spec.replicas: must be between 1 and 100, got 0"]
        );
        assert_eq!(refusal.left_out, ["spec.replicas"]);
        assert!(o.parsed.unwrap_err().to_string().contains("renewDeadline"));
        // A record that does not parse under this release is not taken.
        value["status"]["lastValidSpec"]["replicas"] = json!("four");
        let o = observe(&dynamic(value));
        assert!(o.object.last_valid.is_none());
        assert!(o.object.last_valid_refusal.is_none());
        let err = o.parsed.unwrap_err().to_string();
        assert!(
            err.contains("generation 3, cannot be read back by this release, so it is not applied: spec.replicas"),
            "{err}"
        );
    }

    #[test]
    fn unknown_spec_field_is_an_error_not_a_panic() {
        let obj = dynamic(json!({
            "apiVersion": "knativeha.dev/v1alpha1", "kind": "HighAvailabilityPolicy",
            "metadata": {"name": "bad"},
            "spec": {"targetNamespace": "ns", "replicaz": 3}
        }));
        let o = observe(&obj);
        let err = o.parsed.unwrap_err().to_string();
        assert!(err.contains("replicaz"), "{err}");
        assert_eq!(o.object.uid, "bad");
    }
}
