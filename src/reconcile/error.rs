//! Errors of the reconciler and of `audit`, and what an API server's
//! refusal means to them.

use crate::engine::Kind;
use crate::findings::Forbidden;

/// Errors of the reconciler and of `audit`.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("{action} {} {namespace}/{name}", kind.as_str())]
    Api {
        action: &'static str,
        kind: Kind,
        namespace: String,
        name: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("decoding a {kind}")]
    Decode {
        kind: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// The engine's error names the object (a listed object is always a
    /// JSON object), so this names only the step.
    #[error("computing the changes")]
    Engine(#[source] Box<crate::engine::EngineError>),
}

/// The result of the reconciler's steps.
pub type Result<T, E = ReconcileError> = std::result::Result<T, E>;

/// The status code of an API server's answer; `None` when no answer came.
fn code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

impl ReconcileError {
    /// What the API server refused, when it answered a read with 403
    /// Forbidden (the service account lacks the right).
    pub fn forbidden(&self) -> Option<Forbidden> {
        match self {
            ReconcileError::Api {
                action,
                kind,
                source,
                ..
            } if is_forbidden(source) => Some(refused(action, *kind)),
            _ => None,
        }
    }
}

/// 403 Forbidden: the service account may not do this (RBAC).
pub fn is_forbidden(e: &kube::Error) -> bool {
    code(e) == Some(403)
}

/// `verb` refused on `kind`, the resource named as RBAC names it
/// (`deployments.apps`, `configmaps`).
pub fn refused(verb: &str, kind: Kind) -> Forbidden {
    let resource = super::resource::api_resource(kind);
    Forbidden {
        verb: verb.to_string(),
        resource: if resource.group.is_empty() {
            resource.plural
        } else {
            format!("{}.{}", resource.plural, resource.group)
        },
    }
}

/// 404 Not Found: the object (or the resource type) does not exist.
pub fn is_not_found(e: &kube::Error) -> bool {
    code(e) == Some(404)
}

/// 409 Conflict: the object changed since it was read (a stale
/// `resourceVersion` in a replace), or it already exists (a create).
pub fn is_conflict(e: &kube::Error) -> bool {
    code(e) == Some(409)
}

/// Attempts per object: the first write plus retries after a guarded
/// write lost the race (`is_precondition_failed`).
pub const MAX_ATTEMPTS: u32 = 4;

/// A guarded write lost the race: 409 Conflict (the resourceVersion
/// precondition), or 422 Invalid (the JSON patch's `test` of
/// `metadata.resourceVersion` failed). Read the object again and retry.
pub fn is_precondition_failed(e: &kube::Error) -> bool {
    is_conflict(e) || code(e) == Some(422)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{EngineError, Fault};

    #[test]
    fn an_engine_error_names_the_object_once() {
        let e = ReconcileError::Engine(Box::new(EngineError::Malformed {
            kind: "Deployment".into(),
            namespace: "knative-serving".into(),
            name: "controller".into(),
            fault: Box::new(Fault::Missing {
                path: "spec.template".into(),
            }),
        }));
        assert_eq!(
            crate::errors::chain(&e),
            "computing the changes: Deployment knative-serving/controller: spec.template is required"
        );
    }
}
