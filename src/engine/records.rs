//! What the engine replaced, recorded on the object, and putting it back.
//!
//! Before the engine first changes a field whose release value it would
//! otherwise lose, it writes the annotation [`RecordedField::annotation`]
//! holding the JSON text of the value the object had (`null`: unset). A
//! record is written once and kept while a policy asks for the field: when
//! none does any more, the kind handlers put the recorded value back and
//! drop the record (`undo`); [`super::restore`] puts every record back at
//! once. Every record annotation is named here (each kind's in its
//! [`super::kinds::KINDS`] entry, the others in [`OTHER_RECORDS`]); the kind
//! handlers use these primitives and none of them uses a handler.

use serde_json::Value;

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

/// The record of `key`, as written; None when there is none.
pub(crate) fn annotation<'v>(object: &'v Value, key: &str) -> Option<&'v Value> {
    super::lookup(object, &["metadata", "annotations", key])
}

/// The record `key` read back from its JSON text (None when there is
/// none); a text that is not `want` is a [`Fault::Record`].
pub(crate) fn parsed<T: serde::de::DeserializeOwned>(
    object: &Value,
    key: &'static str,
    want: &'static str,
) -> Result<Option<T>, Fault> {
    let Some(text) = annotation(object, key) else {
        return Ok(None);
    };
    let value = text.as_str().and_then(|t| serde_json::from_str(t).ok());
    value
        .map(Some)
        .ok_or_else(|| Fault::record(key, want, text))
}

/// A value for a change line; `unset` for none.
pub(crate) fn shown(value: Option<&Value>) -> String {
    value.map_or("unset".to_string(), show)
}

/// Sets the annotation `key` to `text` in `p` (a copy of `t.object`).
pub(crate) fn annotate(
    t: &Target<'_>,
    p: &mut Patcher,
    key: &str,
    text: String,
) -> Result<(), EngineError> {
    let path = ["metadata", "annotations", key];
    super::check_parents(t, &path)?;
    p.set(&path, Value::String(text))
        .map_err(|e| t.malformed(e))?;
    Ok(())
}

/// The recorded value of `r`: `None` when not recorded, `Some(None)` when
/// the field was unset.
pub(crate) fn recorded(object: &Value, r: &RecordedField) -> Result<Option<Option<Value>>, Fault> {
    let want = "the JSON text of the recorded value";
    let Some(parsed) = parsed::<Value>(object, r.annotation, want)? else {
        return Ok(None);
    };
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

/// The engine's last write of `r`'s field (`Some(None)`: unset) when the
/// field no longer holds it: someone else changed it since.
pub(crate) fn changed_since_written(
    object: &Value,
    r: &RecordedField,
) -> Result<Option<Option<Value>>, Fault> {
    let Some(w) = r.written else {
        return Ok(None);
    };
    let want = "the JSON text of the engine's last write";
    let Some(last) = parsed::<Value>(object, w, want)? else {
        return Ok(None);
    };
    let last = Some(last).filter(|v| !v.is_null());
    let current = super::lookup(object, r.path).filter(|v| !v.is_null());
    Ok((current != last.as_ref()).then_some(last))
}

/// The patcher of `t` (made on first use) after recording each of
/// `records` not recorded yet: what a handler takes before it changes one.
pub(crate) fn patcher<'p>(
    t: &Target<'_>,
    p: &'p mut Option<Patcher>,
    records: &[&RecordedField],
) -> Result<&'p mut Patcher, EngineError> {
    let pt = p.get_or_insert_with(|| Patcher::new(t.object));
    for r in records {
        if annotation(t.object, r.annotation).is_none() {
            let original = super::lookup(t.object, r.path)
                .filter(|v| r.defaulted.is_none_or(|d| v.as_str() != Some(d)))
                .unwrap_or(&Value::Null);
            annotate(t, pt, r.annotation, original.to_string())?;
        }
    }
    Ok(pt)
}

/// Writes `value` to `r`'s field in `p` (made on first use), the release
/// value recorded first.
pub(crate) fn write(
    t: &Target<'_>,
    p: &mut Option<Patcher>,
    r: &RecordedField,
    value: Value,
) -> Result<(), EngineError> {
    super::check_parents(t, r.path)?;
    patcher(t, p, &[r])?
        .set(r.path, value)
        .map_err(|e| t.malformed(e))?;
    Ok(())
}

/// In the engine: [`put_back`] once no policy setting asks for `r`.
pub(crate) fn undo(
    t: &Target<'_>,
    p: &mut Option<Patcher>,
    r: &RecordedField,
    changes: &mut Vec<Change>,
) -> Result<(), EngineError> {
    let (what, why) = match put_back(t.object, p, r).map_err(|e| t.malformed(e))? {
        Some(PutBack::Restored(what)) => (
            what,
            "the recorded release value: no policy setting asks for it any more",
        ),
        Some(PutBack::Theirs(what)) => (what, "no policy setting asks for it any more"),
        None => return Ok(()),
    };
    changes.push(t.change(what).noted(why));
    Ok(())
}

/// What [`put_back`] did, and the change that says it.
pub(crate) enum PutBack {
    Restored(What),
    /// Someone else changed the field since: it is kept, the records go.
    Theirs(What),
}

/// Puts the recorded value of `r` back in `p` (a copy of `object`, made on
/// first use) and drops the records, unless someone else changed the field
/// since the engine's last write. None when nothing is recorded.
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
        pt.remove_annotation(w);
    }
    if let Some(last) = theirs {
        pt.remove_annotation(r.annotation);
        return Ok(Some(PutBack::Theirs(What::KeptTheirs {
            field: r.path.join("."),
            value: shown(super::lookup(object, r.path)),
            written: shown(last.as_ref()),
        })));
    }
    let current = super::lookup(&pt.doc, r.path)
        .filter(|v| !v.is_null())
        .cloned();
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
        None => pt.remove_pruned(r.path),
        Some(v) => {
            pt.set(r.path, v)?;
        }
    }
    pt.remove_annotation(r.annotation);
    Ok(Some(PutBack::Restored(what)))
}
