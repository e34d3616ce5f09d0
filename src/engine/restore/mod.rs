//! [`restore`]: every governed field back to its release value (as the
//! engine recorded it, [`super::records`]), every record removed, and what
//! the engine owns outright (its marked anti-affinity terms, the
//! leader-election hash) removed, for `knative-ha-webhook restore` before
//! the webhook is uninstalled (a PDB left with the engine's `maxUnavailable`
//! makes the release's own `kubectl apply` fail: it re-adds `minAvailable`).
//! [`undo_unclaimed`] applies it where no policy object exists at all;
//! `leader` is the engine's undo of leader election on a Deployment.

mod deployment;
pub(crate) mod leader;
mod unclaimed;

pub use unclaimed::{WHY, carries_records, undo_unclaimed};

use serde_json::Value;

use super::change::{FieldChange, What};
use super::created::LAST_APPLIED;
use super::patch::Patcher;
use super::records::{PutBack, annotation, put_back};
use super::{Cause, Change, EngineError, Fault, Kind, LEADER_ELECTION_CONFIGMAP, Mutated};
use crate::policy::schema_check::show;

const NAME_PATH: &[&str] = &["metadata", "name"];

/// The object's kind and name, for its change lines.
struct Named<'a> {
    kind: Kind,
    name: &'a str,
}

impl Named<'_> {
    /// A release value put back.
    fn restored(&self, what: What) -> Change {
        Change::new(self.kind.prefix(), self.name, what, Cause::Restored)
    }

    /// A change whose line says it all.
    fn stated(&self, what: What) -> Change {
        Change::new(self.kind.prefix(), self.name, what, Cause::Unstated)
    }
}

/// The restore of `object` (in `namespace`, for messages): an empty patch
/// for an object the engine never changed (or already restored).
pub fn restore(namespace: &str, object: &Value) -> Result<Mutated, EngineError> {
    if !object.is_object() {
        return Err(EngineError::NotAnObject);
    }
    let Some(kind) = Kind::of(object) else {
        return Ok(Mutated::default());
    };
    let name = super::lookup(object, NAME_PATH)
        .and_then(Value::as_str)
        .unwrap_or("");
    let n = Named { kind, name };
    // Only config-leader-election of the ConfigMaps carries records (a
    // Scale declares none: it is restored through its Deployment).
    if kind == Kind::ConfigMap && name != LEADER_ELECTION_CONFIGMAP {
        return Ok(Mutated::default());
    }
    let mut p: Option<Patcher> = None;
    let changes = restored(&n, object, &mut p).map_err(|e| kind.malformed(namespace, name, e))?;
    // Every change comes with a write (a record, at least, goes).
    Ok(Mutated::of(p, changes))
}

/// What [`restore`] puts back in `p`: the changes.
fn restored(n: &Named<'_>, object: &Value, p: &mut Option<Patcher>) -> Result<Vec<Change>, Fault> {
    let mut changes = Vec::new();
    for r in n.kind.spec().records {
        match put_back(object, p, r)? {
            Some(PutBack::Restored(what)) => changes.push(n.restored(what)),
            Some(PutBack::Theirs(what)) => changes.push(n.stated(what)),
            None => {}
        }
    }
    // Each kind's own marks and fields, beyond its records (exhaustive: a
    // new kind is asked for here by the compiler).
    match n.kind {
        Kind::HorizontalPodAutoscaler => {
            if let Some(pt) = p.as_mut() {
                // The engine's record of its own last write goes with the originals.
                for key in [super::records::WRITTEN_MIN, super::records::WRITTEN_MAX] {
                    pt.remove_annotation(key);
                }
            }
        }
        Kind::PodDisruptionBudget => match super::pdb::restore_original(object, p)? {
            Some(fields) => {
                changes.extend(
                    fields
                        .into_iter()
                        .map(|f| n.restored(What::Fields(vec![f]))),
                );
            }
            None => changes.extend(last_applied_pdb(n, object, p)),
        },
        Kind::Deployment => changes.extend(deployment::engine_owned(n, object, p)?),
        // Its records are all it carries; a Scale is restored through its
        // Deployment.
        Kind::ConfigMap | Kind::Scale => {}
    }
    Ok(changes)
}

/// A PDB without records (changed by an earlier webhook, which did not
/// record them) holding the one field of minAvailable/maxUnavailable that
/// its last client-side apply did not set: that apply's field back, the
/// other removed (what the next apply needs). The change that says so.
fn last_applied_pdb(n: &Named<'_>, object: &Value, p: &mut Option<Patcher>) -> Option<Change> {
    if annotation(object, super::pdb::ORIGINAL).is_some() {
        return None;
    }
    let applied: Value = serde_json::from_str(annotation(object, LAST_APPLIED)?.as_str()?).ok()?;
    let spec = applied.get("spec")?;
    let set = |v: &Value, k: &str| v.get(k).is_some_and(|x| !x.is_null());
    let current = object.get("spec")?;
    for (field, other) in [
        ("minAvailable", "maxUnavailable"),
        ("maxUnavailable", "minAvailable"),
    ] {
        if set(spec, field) && !set(spec, other) && set(current, other) {
            let value = spec[field].clone();
            let pt = p.get_or_insert_with(|| Patcher::new(object));
            pt.set(&["spec", field], value.clone()).ok()?;
            pt.remove(&["spec", other]);
            let fields = vec![
                FieldChange::removed(format!("spec.{other}"), show(&current[other])),
                FieldChange {
                    before: None,
                    ..FieldChange::new(format!("spec.{field}"), "", show(&value))
                },
            ];
            return Some(n.stated(What::Fields(fields)).noted(format!(
                "restored from {LAST_APPLIED}: no record of the release value"
            )));
        }
    }
    None
}
