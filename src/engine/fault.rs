//! What is wrong with an object the engine cannot compute a patch for
//! ([`Fault`]): the part of [`super::EngineError::Malformed`] after
//! `Kind namespace/name: `, kept as data so a caller can tell a mistyped
//! field from an unreadable record, and printed once, by that error.

use serde_json::Value;

use super::affinity::AffinityError;
use super::patch::PatchError;
use crate::policy::schema_check::show;

/// What is wrong with the object, each naming the field by its path.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Fault {
    /// A field holds a value of another type (`got`: the value as shown).
    #[error("{path} must be {want}, got {got}")]
    Mistyped {
        path: String,
        want: &'static str,
        got: String,
    },
    /// A field holds something other than what its path needs.
    #[error("{path} must be {want}")]
    Misshapen { path: String, want: &'static str },
    /// A field the kind needs is unset.
    #[error("{path} is required")]
    Missing { path: String },
    /// One of the engine's records (an annotation) does not read back as
    /// what the engine writes there.
    #[error("metadata.annotations.{annotation} must be {want}, got {got}")]
    Record {
        annotation: &'static str,
        want: &'static str,
        got: String,
    },
    /// The pod anti-affinity cannot be rewritten.
    #[error(transparent)]
    Affinity(#[from] AffinityError),
    /// A write cannot be made where the object's shape puts it.
    #[error(transparent)]
    Patch(#[from] PatchError),
}

impl Fault {
    /// `path` holds `value`, which is not `want` (`an integer`, `a list`).
    pub fn mistyped(path: impl Into<String>, want: &'static str, value: &Value) -> Fault {
        Fault::Mistyped {
            path: path.into(),
            want,
            got: show(value),
        }
    }

    /// The record `annotation` holds `value`, which is not `want`.
    pub fn record(annotation: &'static str, want: &'static str, value: &Value) -> Fault {
        Fault::Record {
            annotation,
            want,
            got: show(value),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::engine::{Answering, EngineError, Input, Operation, Snapshot};

    fn deployment() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "controller", "namespace": "knative-serving"},
               "spec": {"replicas": "3"}})
    }

    #[test]
    fn a_mistyped_field_is_matchable_and_printed_once_after_the_object() {
        let policy =
            crate::policy::Policy::from_yaml(include_str!("../../examples/policy.yaml")).unwrap();
        let object = deployment();
        let input = Input {
            operation: Operation::Create,
            namespace: "knative-serving",
            object: &object,
        };
        let err = crate::engine::outcome(
            Answering::Governed(&Snapshot::from_policies([policy])),
            &input,
        )
        .unwrap_err();
        let EngineError::Malformed { fault, .. } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(
            **fault,
            Fault::Mistyped {
                path: "spec.replicas".into(),
                want: "an integer",
                got: "\"3\"".into(),
            }
        );
        assert_eq!(
            err.to_string(),
            "Deployment knative-serving/controller: spec.replicas must be an integer, got \"3\""
        );
    }

    #[test]
    fn an_unreadable_record_is_a_record_fault() {
        let mut object = deployment();
        object["spec"]["replicas"] = json!(1);
        object["metadata"]["annotations"] =
            json!({crate::engine::records::ORIGINAL_DISABLE_HA: "maybe"});
        let err = crate::engine::restore::restore("knative-serving", &object).unwrap_err();
        let EngineError::Malformed { fault, .. } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(
            **fault,
            Fault::Record {
                annotation: crate::engine::records::ORIGINAL_DISABLE_HA,
                want: "\"true\" or \"false\"",
                got: "\"maybe\"".into(),
            }
        );
        assert_eq!(
            fault.to_string(),
            "metadata.annotations.knativeha.dev/original-disable-ha must be \"true\" or \"false\", got \"maybe\""
        );
    }
}
