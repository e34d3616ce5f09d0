//! What the cluster source reports back: the `Ready` condition on each
//! HighAvailabilityPolicy (status subresource) and Kubernetes Events on
//! policy ConfigMaps.
//!
//! Writes happen only when the desired status differs from what the object
//! already carries, so a status write (which the watcher sees as a
//! MODIFIED event) never triggers another write.
//!
//! With the condition goes the record of the last valid version
//! (`status.lastValidSpec`, `status.lastValidGeneration`), written whenever
//! the current generation is valid and left as it is otherwise: a restarted
//! webhook reads it back when the current spec is invalid and keeps
//! applying it ([`ObservedStatus::last_valid`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

use super::merge::{Origin, PolicyObject, Verdict};
use crate::findings::Coverage;
use crate::policy::{HighAvailabilityPolicyStatus, LeftAloneStatus};

/// The `Ready` condition type.
pub const READY: &str = "Ready";

/// The `Ready` reason of an invalid object whose last valid version is
/// in force without the settings this release refuses (a recorded version
/// from a release without some of this release's rules).
pub const LAST_VALID_REFUSED: &str = "LastValidRefusedByThisRelease";

/// The parts of a `Ready` condition the source decides (everything but the
/// transition time).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadyStatus {
    /// `True` or `False`.
    pub status: &'static str,
    /// The verdict's ([`desired`]) or the reconciler's ([`super::verdict`]).
    pub reason: &'static str,
    pub message: String,
    pub observed_generation: Option<i64>,
    /// The record of the last valid version to write with the condition
    /// (the current generation, when it is valid); `None` leaves the
    /// object's record as it is.
    pub record: Option<LastValid>,
    /// What the policy governs, leaves alone and overrides, as the
    /// reconciler found it (`status.governedObjects`, `status.leftAlone`,
    /// `status.operatorOverrides`); `None` leaves them as they are (this
    /// replica does not know).
    pub coverage: Option<Coverage>,
}

/// The status fields of a [`Coverage`], as written and as read back: the
/// CRD's own status type, so what is written is what its schema keeps.
pub fn coverage_fields(c: &Coverage) -> Value {
    let status = HighAvailabilityPolicyStatus {
        governed_objects: Some(i64::try_from(c.targets).unwrap_or(i64::MAX)),
        left_alone: Some(
            c.left_alone
                .iter()
                .map(|u| LeftAloneStatus {
                    kind: u.kind.to_string(),
                    name: u.name.clone(),
                    reason: u.why.to_string(),
                })
                .collect(),
        ),
        operator_overrides: Some(c.overrides.iter().map(ToString::to_string).collect()),
        ..HighAvailabilityPolicyStatus::default()
    };
    serde_json::to_value(status).unwrap_or(Value::Null)
}

/// The record of the last valid version: `status.lastValidSpec` and
/// `status.lastValidGeneration` of a HighAvailabilityPolicy, or the
/// annotation [`super::configmaps::LAST_VALID_ANNOTATION`] of a policy
/// ConfigMap (`{"name": ..., "spec": ...}`; no generation).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LastValid {
    pub generation: Option<i64>,
    /// The policy's name (ConfigMaps; a HighAvailabilityPolicy is its object's name).
    pub name: Option<String>,
    /// The spec as the webhook applies it (serialised from the parsed spec).
    pub spec: Value,
}

/// What a HighAvailabilityPolicy currently carries in `status`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ObservedStatus {
    pub observed_generation: Option<i64>,
    pub ready: Option<Condition>,
    /// The record of the last valid version, if any.
    pub last_valid: Option<LastValid>,
    /// The fields [`coverage_fields`] writes, as the object holds them.
    pub coverage: Value,
}

impl ObservedStatus {
    /// Reads `status` of an object as the API server returned it. Anything
    /// unreadable counts as absent (and will be overwritten).
    pub fn from_object(object: &Value) -> ObservedStatus {
        let field = |k: &str| object.get("status").and_then(|s| s.get(k));
        let ready = field("conditions")
            .and_then(Value::as_array)
            .and_then(|conds| {
                conds
                    .iter()
                    .find(|c| c.get("type").and_then(Value::as_str) == Some(READY))
            })
            .and_then(|c| serde_json::from_value::<Condition>(c.clone()).ok());
        let last_valid = field("lastValidSpec")
            .filter(|spec| spec.is_object())
            .map(|spec| LastValid {
                generation: field("lastValidGeneration").and_then(Value::as_i64),
                name: None,
                spec: spec.clone(),
            });
        let coverage = ["governedObjects", "leftAlone", "operatorOverrides"]
            .map(|k| (k.to_string(), field(k).cloned().unwrap_or(Value::Null)));
        ObservedStatus {
            observed_generation: field("observedGeneration").and_then(Value::as_i64),
            ready,
            last_valid,
            coverage: Value::Object(coverage.into_iter().collect()),
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
            && (desired.record.is_none() || self.last_valid == desired.record)
            && desired
                .coverage
                .as_ref()
                .is_none_or(|c| self.coverage == coverage_fields(c))
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
        Verdict::Invalid {
            message,
            kept,
            kept_generation,
            refusal,
        } => {
            let generation =
                kept_generation.map_or(String::new(), |g| format!(", generation {g},"));
            let version = format!("the last valid version{generation}");
            match (kept, refusal) {
                (true, Some(refusal)) => (
                    "False",
                    LAST_VALID_REFUSED,
                    format!(
                        "{message} ({version} is refused by this release, whose rules the release that recorded it did not all have: {}; it stays in force without {}; fix the policy)",
                        refusal.errors.join("; "),
                        refusal.left_out.join(", "),
                    ),
                ),
                (true, None) => (
                    "False",
                    "Invalid",
                    format!("{message} ({version} stays in force)"),
                ),
                (false, _) => ("False", "Invalid", message.clone()),
            }
        }
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
        record: None,
        coverage: None,
    }
}

/// The record of the last valid version a policy object should carry: its
/// current version when that is valid (whether in force or not), else
/// `None` (the record stays as it is).
pub fn record(obj: &PolicyObject) -> Option<LastValid> {
    let policy = obj.last_valid.as_ref().filter(|_| obj.error.is_none())?;
    Some(LastValid {
        generation: obj.generation.filter(|_| obj.origin == Origin::Resource),
        name: (obj.origin == Origin::ConfigMap).then(|| policy.name.clone()),
        spec: serde_json::to_value(&policy.spec).ok()?,
    })
}

/// The merge patch for `/status`: the `Ready` condition, with
/// `lastTransitionTime` kept unless `status` changes, and the record of the
/// last valid version when there is one to write (fields of the old record
/// the new one lacks are removed: a merge patch would keep them).
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
    let mut patch = json!({
        "status": {
            "observedGeneration": desired.observed_generation,
            "conditions": [condition],
        }
    });
    if let Some(record) = &desired.record {
        let old = observed.last_valid.as_ref().map(|l| &l.spec);
        patch["status"]["lastValidSpec"] = replacing(old.unwrap_or(&Value::Null), &record.spec);
        patch["status"]["lastValidGeneration"] = json!(record.generation);
    }
    if let Some(c) = &desired.coverage
        && let (Some(out), Value::Object(fields)) =
            (patch["status"].as_object_mut(), coverage_fields(c))
    {
        out.extend(fields);
    }
    patch
}

/// The merge patch that turns `old` into `new` (RFC 7396): `new`, with a
/// `null` for every member of `old` that `new` lacks, at every depth.
fn replacing(old: &Value, new: &Value) -> Value {
    let (Value::Object(old), Value::Object(new)) = (old, new) else {
        return new.clone();
    };
    let merged = new
        .iter()
        .map(|(k, v)| (k.clone(), replacing(old.get(k).unwrap_or(&Value::Null), v)));
    let removed = old.keys().filter(|k| !new.contains_key(*k));
    Value::Object(
        merged
            .chain(removed.map(|k| (k.clone(), Value::Null)))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::recorded::Refusal;

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
                kept_generation: Some(2),
                refusal: None,
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
        let message = c["message"].as_str().unwrap();
        assert!(message.contains("spec.replicas"), "{message}");
        assert!(
            message.ends_with("(the last valid version, generation 2, stays in force)"),
            "{message}"
        );
        assert!(
            patch["status"].get("lastValidSpec").is_none(),
            "record kept as it is"
        );
        assert_eq!(
            c["lastTransitionTime"],
            json!(Timestamp::from_second(9_000).unwrap().to_string())
        );
    }

    #[test]
    fn the_record_is_written_whole_and_read_back() {
        let mut d = valid(4);
        d.record = Some(LastValid {
            generation: Some(4),
            name: None,
            spec: json!({"targetNamespace": "knative-serving", "leaderElection": {"buckets": 3}}),
        });
        let obj = json!({"status": {"observedGeneration": 4,
            "conditions": [cond("True", "Valid", &d.message, 4, 1_000)],
            "lastValidGeneration": 3,
            "lastValidSpec": {"targetNamespace": "knative-serving", "replicas": 3,
                              "leaderElection": {"buckets": 2, "leaseDuration": "60s"}}}});
        let observed = ObservedStatus::from_object(&obj);
        assert_eq!(observed.last_valid.as_ref().unwrap().generation, Some(3));
        assert!(!observed.matches(&d), "an older record is rewritten");
        let patch = status_patch(&d, &observed, Timestamp::from_second(9_000).unwrap());
        assert_eq!(patch["status"]["lastValidGeneration"], 4);
        let mut stored = obj["status"]["lastValidSpec"].clone();
        json_patch::merge(&mut stored, &patch["status"]["lastValidSpec"]);
        assert_eq!(stored, d.record.as_ref().unwrap().spec);
        let mut written = obj.clone();
        json_patch::merge(&mut written, &patch);
        assert!(ObservedStatus::from_object(&written).matches(&d));
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

    #[test]
    fn a_refused_last_valid_version_has_its_own_reason_and_says_what_to_fix() {
        let invalid = |kept_generation| Verdict::Invalid {
            message: "spec.leaderElection.renewDeadline: too short".into(),
            kept: true,
            kept_generation,
            refusal: Some(Refusal {
                errors: vec![
                    "spec.replicas: must be between 1 and 100, got 0".into(),
                    "x".into(),
                ],
                left_out: vec!["spec.replicas".into(), "spec.exclude[1]".into()],
            }),
        };
        let d = desired(&invalid(Some(3)), Origin::Resource, Some(5));
        assert_eq!(
            (d.status, d.reason),
            ("False", "LastValidRefusedByThisRelease")
        );
        assert_eq!(
            d.message,
            "spec.leaderElection.renewDeadline: too short (the last valid version, generation 3, \
             is refused by this release, whose rules the release that recorded it did not all have: \
             spec.replicas: must be between 1 and 100, got 0; x; \
             it stays in force without spec.replicas, spec.exclude[1]; fix the policy)"
        );
        let d = desired(&invalid(None), Origin::ConfigMap, None);
        assert_eq!(d.reason, LAST_VALID_REFUSED);
        assert!(
            d.message
                .contains("too short (the last valid version is refused by")
        );
    }
}
