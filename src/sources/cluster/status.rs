//! What the cluster source reports back: the `Ready` condition on each
//! HighAvailabilityPolicy (status subresource) and Kubernetes Events on
//! policy ConfigMaps.
//!
//! Writes happen only when the desired status differs from what the object
//! already carries, so a status write (which the watcher sees as a
//! MODIFIED event) never triggers another write.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::merge::{Origin, Verdict};

/// The `Ready` condition type.
pub const READY: &str = "Ready";

/// The parts of a `Ready` condition the source decides (everything but the
/// transition time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadyStatus {
    /// `True` or `False`.
    pub status: &'static str,
    /// `Valid`, `Invalid`, `Conflict` or `NotGoverned`.
    pub reason: &'static str,
    pub message: String,
    pub observed_generation: Option<i64>,
}

/// What a HighAvailabilityPolicy currently carries in `status`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObservedStatus {
    pub observed_generation: Option<i64>,
    pub ready: Option<Condition>,
}

impl ObservedStatus {
    /// Reads `status` of an object as the API server returned it. Anything
    /// unreadable counts as absent (and will be overwritten).
    pub fn from_object(object: &Value) -> ObservedStatus {
        let status = object.get("status");
        let observed_generation = status
            .and_then(|s| s.get("observedGeneration"))
            .and_then(Value::as_i64);
        let ready = status
            .and_then(|s| s.get("conditions"))
            .and_then(Value::as_array)
            .and_then(|conds| {
                conds
                    .iter()
                    .find(|c| c.get("type").and_then(Value::as_str) == Some(READY))
            })
            .and_then(|c| serde_json::from_value::<Condition>(c.clone()).ok());
        ObservedStatus {
            observed_generation,
            ready,
        }
    }

    /// True when the object already says what `desired` says.
    pub fn matches(&self, desired: &ReadyStatus) -> bool {
        let Some(ready) = &self.ready else {
            return false;
        };
        self.observed_generation == desired.observed_generation
            && ready.observed_generation == desired.observed_generation
            && ready.status == desired.status
            && ready.reason == desired.reason
            && ready.message == desired.message
    }
}

/// The `Ready` condition a verdict calls for.
pub fn desired(verdict: &Verdict, kind: Origin, generation: Option<i64>) -> ReadyStatus {
    let (status, reason, message) = match verdict {
        Verdict::Valid { namespace } => (
            "True",
            "Valid",
            format!("policy in force for namespace {namespace}"),
        ),
        Verdict::Invalid { message, kept } => (
            "False",
            "Invalid",
            if *kept {
                format!("{message} (the last valid version stays in force)")
            } else {
                message.clone()
            },
        ),
        Verdict::Conflict { namespace, winner } => (
            "False",
            "Conflict",
            match kind {
                Origin::Resource => format!(
                    "spec.targetNamespace: namespace {namespace} is already governed by {winner} (the oldest policy wins)"
                ),
                Origin::ConfigMap => format!(
                    "spec.targetNamespace: namespace {namespace} is governed by {winner} (a HighAvailabilityPolicy wins over a ConfigMap; among equals the oldest wins)"
                ),
            },
        ),
        Verdict::NotGoverned {
            namespace,
            governed,
        } => (
            "False",
            "NotGoverned",
            format!(
                "spec.targetNamespace: namespace {namespace} is not one this webhook may govern (--governed-namespaces {governed}); the policy is not applied"
            ),
        ),
    };
    ReadyStatus {
        status,
        reason,
        message,
        observed_generation: generation,
    }
}

/// The merge patch for `/status`: the `Ready` condition, with
/// `lastTransitionTime` kept unless `status` changes.
pub fn status_patch(desired: &ReadyStatus, observed: &ObservedStatus, now: Timestamp) -> Value {
    let last_transition_time = match &observed.ready {
        Some(prev) if prev.status == desired.status => prev.last_transition_time.clone(),
        _ => Time(now),
    };
    let condition = Condition {
        type_: READY.to_string(),
        status: desired.status.to_string(),
        reason: desired.reason.to_string(),
        message: desired.message.clone(),
        observed_generation: desired.observed_generation,
        last_transition_time,
    };
    json!({
        "status": {
            "observedGeneration": desired.observed_generation,
            "conditions": [condition],
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(status: &str, reason: &str, message: &str, gen_: i64, at: i64) -> Value {
        json!({
            "type": "Ready", "status": status, "reason": reason, "message": message,
            "observedGeneration": gen_,
            "lastTransitionTime": Timestamp::from_second(at).unwrap().to_string(),
        })
    }

    fn valid(gen_: i64) -> ReadyStatus {
        desired(
            &Verdict::Valid {
                namespace: "knative-serving".into(),
            },
            Origin::Resource,
            Some(gen_),
        )
    }

    #[test]
    fn absent_status_never_matches() {
        assert!(!ObservedStatus::from_object(&json!({})).matches(&valid(1)));
    }

    #[test]
    fn identical_status_matches_so_no_write() {
        let d = valid(2);
        let obj = json!({"status": {"observedGeneration": 2, "conditions": [
            cond("True", "Valid", &d.message, 2, 1_000)]}});
        assert!(ObservedStatus::from_object(&obj).matches(&d));
    }

    #[test]
    fn newer_generation_does_not_match() {
        let d = valid(2);
        let obj = json!({"status": {"observedGeneration": 1, "conditions": [
            cond("True", "Valid", &d.message, 1, 1_000)]}});
        assert!(!ObservedStatus::from_object(&obj).matches(&d));
    }

    #[test]
    fn transition_time_kept_when_status_unchanged() {
        let d = valid(3);
        let obj = json!({"status": {"observedGeneration": 2, "conditions": [
            cond("True", "Valid", &d.message, 2, 1_000)]}});
        let patch = status_patch(
            &d,
            &ObservedStatus::from_object(&obj),
            Timestamp::from_second(9_000).unwrap(),
        );
        assert_eq!(
            patch["status"]["conditions"][0]["lastTransitionTime"],
            json!(Timestamp::from_second(1_000).unwrap().to_string())
        );
        assert_eq!(patch["status"]["observedGeneration"], json!(3));
    }

    #[test]
    fn transition_time_moves_when_status_flips() {
        let d = desired(
            &Verdict::Invalid {
                message: "spec.replicas: must be between 1 and 100".into(),
                kept: true,
            },
            Origin::Resource,
            Some(3),
        );
        let obj = json!({"status": {"observedGeneration": 2, "conditions": [
            cond("True", "Valid", "x", 2, 1_000)]}});
        let patch = status_patch(
            &d,
            &ObservedStatus::from_object(&obj),
            Timestamp::from_second(9_000).unwrap(),
        );
        let c = &patch["status"]["conditions"][0];
        assert_eq!(c["status"], "False");
        assert_eq!(c["reason"], "Invalid");
        assert!(c["message"].as_str().unwrap().contains("spec.replicas"));
        assert_eq!(
            c["lastTransitionTime"],
            json!(Timestamp::from_second(9_000).unwrap().to_string())
        );
    }

    #[test]
    fn conflict_message_names_field_and_winner() {
        let d = desired(
            &Verdict::Conflict {
                namespace: "ns".into(),
                winner: "HighAvailabilityPolicy/old".into(),
            },
            Origin::Resource,
            Some(1),
        );
        assert_eq!((d.status, d.reason), ("False", "Conflict"));
        assert!(d.message.contains("spec.targetNamespace"));
        assert!(d.message.contains("HighAvailabilityPolicy/old"));
    }
}
