//! The mutation engine: a pure function from (policy, admission operation,
//! object, context) to an RFC 6902 patch plus human-readable changes.
//! No I/O, no clocks, no globals.

use std::collections::BTreeSet;

use crate::policy::Policy;

/// The admission operation of a review.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

/// What the engine knows besides the object itself.
#[derive(Clone, Debug, Default)]
pub struct Context {
    /// Names of Deployments in the object's namespace that some
    /// HorizontalPodAutoscaler targets (in addition to the built-in
    /// Knative HPA-backed names).
    pub hpa_targets: BTreeSet<String>,
}

/// The result of mutating one object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Mutation {
    /// RFC 6902 patch; empty when nothing changes.
    pub patch: json_patch::Patch,
    /// One line per change, e.g.
    /// `deployment/controller: spec.replicas 1 -> 3 (policy serving)`.
    pub changes: Vec<String>,
}

impl Mutation {
    pub fn is_empty(&self) -> bool {
        self.patch.0.is_empty()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("object is not a JSON object")]
    NotAnObject,
    #[error("{kind} {namespace}/{name}: {message}")]
    Malformed {
        kind: String,
        namespace: String,
        name: String,
        message: String,
    },
}

/// One object to mutate.
#[derive(Clone, Copy, Debug)]
pub struct Input<'a> {
    pub operation: Operation,
    /// The namespace the object lives in (the admission request's
    /// `namespace`; `default` for namespace-less documents in `preview`).
    pub namespace: &'a str,
    /// The object as the API server would store it (for UPDATE: the new object).
    pub object: &'a serde_json::Value,
}

/// Mutates `input.object` according to `policy`. Objects outside
/// `policy.spec.target_namespace` never get a patch.
pub fn mutate(policy: &Policy, input: &Input<'_>, ctx: &Context) -> Result<Mutation, EngineError> {
    let _ = (policy, ctx);
    if !input.object.is_object() {
        return Err(EngineError::NotAnObject);
    }
    Ok(Mutation::default())
}
