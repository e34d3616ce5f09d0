//! Errors of the reconciler and of `audit`, and what an API server's
//! refusal means to them.

/// Errors of the reconciler and of `audit`.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("{action} {kind} {namespace}/{name}")]
    Api {
        action: &'static str,
        kind: &'static str,
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
    #[error("{kind} {namespace}/{name}")]
    Engine {
        kind: &'static str,
        namespace: String,
        name: String,
        #[source]
        source: Box<crate::engine::EngineError>,
    },
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
