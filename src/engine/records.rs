//! What the engine replaced, recorded on the object, and putting it back.
//!
//! Before the engine first changes a field whose release value it would
//! otherwise lose, it writes the annotation [`RecordedField::annotation`]
//! holding the JSON text of the value the object had (`null` when the
//! field was not set). The HPA's `knativeha.dev/original-min-replicas` and
//! `-max-replicas` ([`super::hpa`]) are the same format (a number's JSON
//! text). A record is written once and kept while a policy asks for the
//! field; it is what the field goes back to.
//!
//! When no policy setting asks for a recorded field any more (a later
//! policy without `podDisruptionBudget`, without Required anti-affinity,
//! without spread constraints, without replicas, without `leaderElection`
//! or one of its keys), the kind handlers put the recorded value back and
//! drop the record (`undo`). [`super::restore`] puts every record back
//! at once.
//!
//! Every record annotation is named here (each kind's in its
//! [`super::kinds::KINDS`] entry, the others in [`OTHER_RECORDS`]); the kind
//! handlers below use these primitives and none of them uses a handler.

use serde_json::{Map, Value};

use super::change::{Change, FieldChange, What};
use super::patch::Patcher;
use super::{EngineError, Fault, Target};
use crate::policy::schema_check::show;
use crate::policy::validate::MAX_REPLICAS;

/// PodDisruptionBudget: the budget the engine replaced (its
/// `minAvailable`/`maxUnavailable`, as JSON text; [`super::pdb`]).
pub const PDB_ORIGINAL: &str = "knativeha.dev/original-budget";
/// PodDisruptionBudget: the budget the engine last wrote ([`super::pdb`]).
pub const PDB_WRITTEN: &str = "knativeha.dev/written-budget";

/// A field whose release value the engine records before changing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordedField {
    /// The object annotation holding the value's JSON text (`null`: unset).
    pub annotation: &'static str,
    /// The field (object keys).
    pub path: &'static [&'static str],
    /// The annotation holding the JSON text of the engine's last write of
    /// the field, where it keeps one: a field that differs from it was
    /// changed by someone else since, and is kept when the record goes.
    pub written: Option<&'static str>,
    /// The value the API server writes where the field is unset: recorded
    /// as unset, as in the manifests (`preview` records what a plain
    /// `kubectl apply` would store, before the API server's defaults).
    pub defaulted: Option<&'static str>,
}

/// Deployment `spec.replicas`.
pub const REPLICAS: RecordedField = RecordedField {
    annotation: "knativeha.dev/original-replicas",
    path: &["spec", "replicas"],
    written: None,
    defaulted: None,
};
/// What the API server writes into a RollingUpdate's unset `maxSurge` and
/// `maxUnavailable`.
pub(crate) const ROLLING_UPDATE_DEFAULT: &str = "25%";

/// A RollingUpdate field's value for a change line: unset shows the
/// default it stands for.
pub(crate) fn show_rolling(current: Option<&Value>) -> String {
    current.map_or_else(|| format!("unset ({ROLLING_UPDATE_DEFAULT})"), show)
}

/// Deployment `spec.strategy.rollingUpdate.maxUnavailable`.
pub const ROLLOUT_MAX_UNAVAILABLE: RecordedField = RecordedField {
    annotation: "knativeha.dev/original-rollout-max-unavailable",
    path: &["spec", "strategy", "rollingUpdate", "maxUnavailable"],
    written: None,
    defaulted: Some(ROLLING_UPDATE_DEFAULT),
};
/// Deployment `spec.strategy.rollingUpdate.maxSurge`.
pub const ROLLOUT_MAX_SURGE: RecordedField = RecordedField {
    annotation: "knativeha.dev/original-rollout-max-surge",
    path: &["spec", "strategy", "rollingUpdate", "maxSurge"],
    written: None,
    defaulted: Some(ROLLING_UPDATE_DEFAULT),
};
/// Deployment `spec.template.spec.topologySpreadConstraints`.
pub const TOPOLOGY_SPREAD: RecordedField = RecordedField {
    annotation: "knativeha.dev/original-topology-spread-constraints",
    path: &["spec", "template", "spec", "topologySpreadConstraints"],
    written: None,
    defaulted: None,
};
/// Deployment `spec.template.spec.priorityClassName`.
pub const PRIORITY_CLASS: RecordedField = RecordedField {
    annotation: "knativeha.dev/original-priority-class-name",
    path: &["spec", "template", "spec", "priorityClassName"],
    written: None,
    defaulted: None,
};
/// HorizontalPodAutoscaler: the `minReplicas` and `maxReplicas` the engine
/// found, and its own last writes of them ([`super::hpa`]).
pub const ORIGINAL_MIN: &str = "knativeha.dev/original-min-replicas";
pub const ORIGINAL_MAX: &str = "knativeha.dev/original-max-replicas";
pub const WRITTEN_MIN: &str = "knativeha.dev/written-min-replicas";
pub const WRITTEN_MAX: &str = "knativeha.dev/written-max-replicas";

/// HorizontalPodAutoscaler `spec.minReplicas` ([`ORIGINAL_MIN`]).
pub const HPA_MIN: RecordedField = RecordedField {
    annotation: ORIGINAL_MIN,
    path: &["spec", "minReplicas"],
    written: None,
    defaulted: None,
};
/// HorizontalPodAutoscaler `spec.maxReplicas` ([`ORIGINAL_MAX`]).
pub const HPA_MAX: RecordedField = RecordedField {
    annotation: ORIGINAL_MAX,
    path: &["spec", "maxReplicas"],
    written: None,
    defaulted: None,
};
/// `config-leader-election` keys the engine writes.
pub const LEADER_ELECTION_KEYS: [RecordedField; 4] = [
    RecordedField {
        annotation: "knativeha.dev/original-data-buckets",
        path: &["data", "buckets"],
        written: Some("knativeha.dev/written-data-buckets"),
        defaulted: None,
    },
    RecordedField {
        annotation: "knativeha.dev/original-data-lease-duration",
        path: &["data", "lease-duration"],
        written: Some("knativeha.dev/written-data-lease-duration"),
        defaulted: None,
    },
    RecordedField {
        annotation: "knativeha.dev/original-data-renew-deadline",
        path: &["data", "renew-deadline"],
        written: Some("knativeha.dev/written-data-renew-deadline"),
        defaulted: None,
    },
    RecordedField {
        annotation: "knativeha.dev/original-data-retry-period",
        path: &["data", "retry-period"],
        written: Some("knativeha.dev/written-data-retry-period"),
        defaulted: None,
    },
];

/// The records that are not of one recorded field (each of those is in
/// its kind's [`super::kinds::KINDS`] entry): the HPA's last writes, a
/// PDB's budget and its last write, the `--disable-ha` flag's.
pub const OTHER_RECORDS: [&str; 5] = [
    WRITTEN_MIN,
    WRITTEN_MAX,
    PDB_ORIGINAL,
    PDB_WRITTEN,
    ORIGINAL_DISABLE_HA,
];

/// An object's annotations.
pub(crate) const ANNOTATIONS: &[&str] = &["metadata", "annotations"];

/// Deployment: whether the Knative container carried `--disable-ha` (JSON
/// `true`/`false`) before the engine first added or removed it.
pub const ORIGINAL_DISABLE_HA: &str = "knativeha.dev/original-disable-ha";

/// The record of the `config-leader-election` data key `key` (none for a
/// key the engine does not write).
pub(crate) fn recorded_key(key: &str) -> Vec<&'static RecordedField> {
    LEADER_ELECTION_KEYS
        .iter()
        .filter(|r| r.path[1] == key)
        .collect()
}

/// The record of `key`, as written; None when there is none.
pub(crate) fn annotation<'v>(object: &'v Value, key: &str) -> Option<&'v Value> {
    super::lookup(object, &["metadata", "annotations", key])
}

/// The recorded value of `r`: `None` when not recorded, `Some(None)` when
/// the field was unset.
pub(crate) fn recorded(object: &Value, r: &RecordedField) -> Result<Option<Option<Value>>, Fault> {
    let Some(text) = annotation(object, r.annotation) else {
        return Ok(None);
    };
    let parsed = text
        .as_str()
        .and_then(|t| serde_json::from_str::<Value>(t).ok())
        .ok_or_else(|| Fault::record(r.annotation, "the JSON text of the recorded value", text))?;
    if !honoured(r, &parsed, object) {
        return Ok(None);
    }
    Ok(Some(Some(parsed).filter(|v| !v.is_null())))
}

/// Whether a recorded value is one the engine can have recorded from a
/// release, and so may put back: anyone who may edit the object may write a
/// record, and the reconciler would write what it says. Replicas within the
/// policy's own bounds (0 for a Deployment scaled on demand, at most 100);
/// never a PriorityClass Kubernetes keeps for the cluster's critical pods;
/// an HPA bound no higher than `object` holds now or the policy's bound
/// ([`hpa_original_honoured`]). Any other record is not honoured: left where
/// it is, nothing put back.
fn honoured(r: &RecordedField, value: &Value, object: &Value) -> bool {
    if r.annotation == REPLICAS.annotation {
        return value.is_null()
            || value
                .as_i64()
                .is_some_and(|n| (0..=i64::from(MAX_REPLICAS)).contains(&n));
    }
    if r.annotation == PRIORITY_CLASS.annotation {
        return value.as_str().is_none_or(|c| !c.starts_with("system-"));
    }
    if r.annotation == HPA_MIN.annotation || r.annotation == HPA_MAX.annotation {
        let current = super::lookup(object, r.path).and_then(Value::as_i64);
        return value.is_null()
            || value
                .as_i64()
                .is_some_and(|n| hpa_original_honoured(n, current.unwrap_or(0)));
    }
    true
}

/// Whether an HPA's recorded original bound `original` may be put back
/// where the field holds `current`: the engine only ever raises an HPA's
/// bounds, so an original it recorded is never above what it wrote; one
/// above both that and the policy's replica bound was written by someone
/// else (`maxReplicas: 2147483647`).
pub(crate) fn hpa_original_honoured(original: i64, current: i64) -> bool {
    original >= 0 && original <= current.max(i64::from(MAX_REPLICAS))
}

/// Records `r`'s current value on the object in `p` (a copy of `t.object`)
/// unless the object already carries a record.
pub(crate) fn record(
    t: &Target<'_>,
    p: &mut Patcher,
    r: &RecordedField,
) -> Result<(), EngineError> {
    if annotation(t.object, r.annotation).is_some() {
        return Ok(());
    }
    let original = super::lookup(t.object, r.path)
        .filter(|v| r.defaulted.is_none_or(|d| v.as_str() != Some(d)))
        .unwrap_or(&Value::Null);
    let path = ["metadata", "annotations", r.annotation];
    super::check_parents(t, &path)?;
    p.set(&path, Value::String(original.to_string()))
        .map_err(|e| t.malformed(e))?;
    Ok(())
}

/// Notes in `p` that the engine wrote `value` to `r`'s field (for a field
/// whose last write is kept, [`RecordedField::written`]).
pub(crate) fn note_written(
    t: &Target<'_>,
    p: &mut Patcher,
    r: &RecordedField,
    value: &Value,
) -> Result<(), EngineError> {
    let Some(w) = r.written else {
        return Ok(());
    };
    let path = ["metadata", "annotations", w];
    super::check_parents(t, &path)?;
    p.set(&path, Value::String(value.to_string()))
        .map_err(|e| t.malformed(e))?;
    Ok(())
}

/// The engine's last write of `r`'s field when the field no longer holds
/// it (someone else changed it since): `Some(written)`, the value the
/// engine wrote (`None`: unset). `None` when no last write is kept or the
/// field still holds it.
pub(crate) fn changed_since_written(
    object: &Value,
    r: &RecordedField,
) -> Result<Option<Option<Value>>, Fault> {
    let Some(w) = r.written else {
        return Ok(None);
    };
    let Some(text) = annotation(object, w) else {
        return Ok(None);
    };
    let last = text
        .as_str()
        .and_then(|t| serde_json::from_str::<Value>(t).ok())
        .ok_or_else(|| Fault::record(w, "the JSON text of the engine's last write", text))?;
    let last = Some(last).filter(|v| !v.is_null());
    let current = super::lookup(object, r.path).filter(|v| !v.is_null());
    Ok((current != last.as_ref()).then_some(last))
}

/// The patcher of `t` (created on first use) after recording `records`:
/// what a kind handler takes before it changes a recorded field.
pub(crate) fn patcher<'p>(
    t: &Target<'_>,
    p: &'p mut Option<Patcher>,
    records: &[&RecordedField],
) -> Result<&'p mut Patcher, EngineError> {
    let pt = p.get_or_insert_with(|| Patcher::new(t.object));
    for r in records {
        record(t, pt, r)?;
    }
    Ok(pt)
}

/// In the engine: when no policy setting asks for `r` any more, puts the
/// recorded value back and drops the record (a change line says so).
pub(crate) fn undo(
    t: &Target<'_>,
    p: &mut Option<Patcher>,
    r: &RecordedField,
    changes: &mut Vec<Change>,
) -> Result<(), EngineError> {
    if annotation(t.object, r.annotation).is_none() {
        return Ok(());
    }
    match put_back(t.object, p, r).map_err(|e| t.malformed(e))? {
        Some(PutBack::Restored(what)) => changes.push(
            t.change(what)
                .noted("the recorded release value: no policy setting asks for it any more"),
        ),
        Some(PutBack::Theirs(what)) => changes.push(
            t.change(what)
                .noted("no policy setting asks for it any more"),
        ),
        None => {}
    }
    Ok(())
}

/// Removes `path`, then the parents below the top level that it left empty.
/// (A pod template's `metadata` still holding the labels is never removed
/// with the hash.)
pub(crate) fn remove_pruned(p: &mut Patcher, path: &[&str]) {
    if !p.remove(path) {
        return;
    }
    for depth in (2..path.len()).rev() {
        let parent = &path[..depth];
        if !super::lookup(&p.doc, parent).is_some_and(|v| v.as_object().is_some_and(Map::is_empty))
        {
            return;
        }
        p.remove(parent);
    }
}

/// What [`put_back`] did, and the change that says it.
pub(crate) enum PutBack {
    /// The recorded value is back.
    Restored(What),
    /// The field was changed by someone else since the engine's last write:
    /// it is kept, only the records go ([`What::KeptTheirs`]).
    Theirs(What),
}

/// Puts the recorded value of `r` back in `p` (a copy of `object`, created
/// on first use) and drops the record, unless someone else changed the
/// field since the engine's last write ([`changed_since_written`]): then
/// the field is kept and only the records go. None when nothing is
/// recorded.
pub(crate) fn put_back(
    object: &Value,
    p: &mut Option<Patcher>,
    r: &RecordedField,
) -> Result<Option<PutBack>, Fault> {
    let Some(original) = recorded(object, r)? else {
        return Ok(None);
    };
    let theirs = changed_since_written(object, r)?;
    let pt = p.get_or_insert_with(|| Patcher::new(object));
    if let Some(w) = r.written {
        remove_pruned(pt, &["metadata", "annotations", w]);
    }
    if let Some(last) = theirs {
        remove_pruned(pt, &["metadata", "annotations", r.annotation]);
        let current = super::lookup(object, r.path).map_or("unset".to_string(), show);
        return Ok(Some(PutBack::Theirs(What::KeptTheirs {
            field: r.path.join("."),
            value: current,
            written: last.as_ref().map_or("unset".to_string(), show),
        })));
    }
    let current = super::lookup(&pt.doc, r.path)
        .filter(|v| !v.is_null())
        .cloned();
    let shown = |v: Option<&Value>| v.map_or("unset".to_string(), show);
    let what = match (&current, &original) {
        (a, b) if a == b => What::KeptRelease {
            field: r.path.join("."),
            value: shown(original.as_ref()),
            record: r.annotation,
        },
        (_, v) => What::Fields(vec![FieldChange::at(
            r.path,
            shown(current.as_ref()),
            v.as_ref().map(show),
        )]),
    };
    match original {
        None => remove_pruned(pt, r.path),
        Some(v) => {
            pt.set(r.path, v)?;
        }
    }
    remove_pruned(pt, &["metadata", "annotations", r.annotation]);
    Ok(Some(PutBack::Restored(what)))
}
