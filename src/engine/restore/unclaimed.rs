//! Where no policy object exists at all (the policy deleted,
//! [`crate::engine::Snapshot::unclaimed`]): an object carrying the engine's
//! records gets [`super::restore`]'s patch at admission, so the release's
//! next `kubectl apply` (which would re-add a PDB's `minAvailable` beside the
//! engine's `maxUnavailable`, and fail) puts the release back instead. An
//! object without records is left alone after a look at its annotations:
//! the engine does not run.

use serde_json::Value;

use crate::engine::kinds::record_annotations;
use crate::engine::records::ANNOTATIONS;
use crate::engine::{EngineError, Mutated, carries_skip_label, leader, lookup};

const POD_ANNOTATIONS: &[&str] = &["spec", "template", "metadata", "annotations"];

/// Why the change lines of [`undo_unclaimed`] are made.
pub const WHY: &str = "no policy governs the namespace any more";

/// True when the object carries one of the engine's records (or the
/// leader-election hash it owns on a pod template) and is not labelled
/// [`crate::engine::SKIP_LABEL`]: a look at a few annotation keys, nothing copied.
pub fn carries_records(object: &Value) -> bool {
    let has = |path: &[&str], key: &str| {
        lookup(object, path)
            .and_then(Value::as_object)
            .is_some_and(|a| a.contains_key(key))
    };
    !carries_skip_label(object)
        && (record_annotations().any(|k| has(ANNOTATIONS, k))
            || has(POD_ANNOTATIONS, leader::HASH_ANNOTATION))
}

/// The engine's answer for a CREATE or UPDATE of `object` in `namespace`
/// where no policy object exists: nothing for an object without records
/// ([`carries_records`]); else [`super::restore`]'s patch, every change
/// line saying why ([`WHY`]).
pub fn undo_unclaimed(namespace: &str, object: &Value) -> Result<Mutated, EngineError> {
    if !object.is_object() {
        return Err(EngineError::NotAnObject);
    }
    // Records are honoured only on Knative's own objects here: on any
    // other, whoever may edit it may have written them.
    if !of_knative(object) || !carries_records(object) {
        return Ok(Mutated::default());
    }
    let mut outcome = super::restore(namespace, object)?;
    let changes = outcome.mutation.changes.into_iter();
    outcome.mutation.changes = changes.map(|c| c.undone_because(WHY)).collect();
    Ok(outcome)
}

/// Whether `object` is one of Knative's own: one of its Deployments (or
/// its Scale), an HPA scaling one, a PDB of one (`app: <name>` or
/// `<name>-pdb`), `config-leader-election`.
fn of_knative(object: &Value) -> bool {
    let name = object.pointer("/metadata/name").and_then(Value::as_str);
    let name = name.unwrap_or_default();
    match super::Kind::of(object) {
        Some(super::Kind::ConfigMap) => name == super::LEADER_ELECTION_CONFIGMAP,
        Some(kind) => (kind.spec().belongs_to)(name, object)
            .into_iter()
            .flatten()
            .any(crate::knative::is_knative),
        None => false,
    }
}
