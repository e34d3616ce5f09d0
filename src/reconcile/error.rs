//! Errors of the reconciler and of `audit`, and what an API server's
//! refusal means to them.

use crate::engine::Kind;
use crate::findings::{Forbidden, Refusal};

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
            } if is_forbidden(source) => Some(refused(action, *kind, source)),
            _ => None,
        }
    }
}

/// 403 Forbidden: the service account may not do this (RBAC).
pub fn is_forbidden(e: &kube::Error) -> bool {
    code(e) == Some(403)
}

/// Why a 403 came: the API server answers it for RBAC, for a used-up
/// ResourceQuota (`exceeded quota: ...`) and for a namespace being deleted
/// (`... because it is being terminated`), all with reason `Forbidden`;
/// the message tells them apart.
pub fn refusal(e: &kube::Error) -> Refusal {
    let kube::Error::Api(status) = e else {
        return Refusal::Rbac;
    };
    if status.message.contains("exceeded quota") {
        Refusal::Quota(status.message.clone())
    } else if status.message.contains("because it is being terminated") {
        Refusal::Terminating
    } else {
        Refusal::Rbac
    }
}

/// `verb` refused on `kind` by `e`, the resource named as RBAC names it
/// (`deployments.apps`, `configmaps`).
pub fn refused(verb: &str, kind: Kind, e: &kube::Error) -> Forbidden {
    let spec = kind.spec();
    Forbidden {
        why: refusal(e),
        verb: verb.to_string(),
        resource: if spec.group.is_empty() {
            spec.plural.to_string()
        } else {
            format!("{}.{}", spec.plural, spec.group)
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

    fn status(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(Box::new(kube::core::Status {
            code,
            message: message.into(),
            reason: "Forbidden".into(),
            ..Default::default()
        }))
    }

    /// What the API server answers (kube-apiserver 1.36, seen on the real
    /// one): RBAC, the quota admission plugin and the namespace lifecycle
    /// plugin all answer 403 with reason Forbidden.
    #[test]
    fn a_403_is_told_apart_by_what_refused_it() {
        let rbac = status(
            403,
            "poddisruptionbudgets.policy is forbidden: User \"system:serviceaccount:khw:khw\" cannot create resource \"poddisruptionbudgets\" in API group \"policy\" in the namespace \"knative-serving\"",
        );
        let quota = status(
            403,
            "poddisruptionbudgets.policy \"controller-pdb\" is forbidden: exceeded quota: pdbs, requested: count/poddisruptionbudgets.policy=1, used: count/poddisruptionbudgets.policy=2, limited: count/poddisruptionbudgets.policy=2",
        );
        let gone = status(
            403,
            "poddisruptionbudgets.policy \"controller-pdb\" is forbidden: unable to create new content in namespace knative-serving because it is being terminated",
        );
        assert_eq!(refusal(&rbac), Refusal::Rbac);
        assert!(matches!(refusal(&quota), Refusal::Quota(m) if m.contains("limited")));
        assert_eq!(refusal(&gone), Refusal::Terminating);
        let f = refused("create", Kind::PodDisruptionBudget, &gone);
        assert_eq!(f.resource, "poddisruptionbudgets.policy");
    }

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
