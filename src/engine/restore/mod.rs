//! What the engine replaced, recorded on the object, and putting it back.
//!
//! Recording: before the engine first changes a field whose release value
//! it would otherwise lose, it writes the annotation [`Recorded::annotation`]
//! holding the JSON text of the value the object had (`null` when the field
//! was not set). The HPA's `knativeha.dev/original-min-replicas` and
//! `-max-replicas` ([`super::hpa`]) are the same format (a number's JSON
//! text). A record is written once and kept while a policy asks for the
//! field; it is what the field goes back to.
//!
//! Undo in the engine: when no policy setting asks for a recorded field any
//! more (a later policy without `podDisruptionBudget`, without Required
//! anti-affinity, without spread constraints, without replicas, without
//! `leaderElection` or one of its keys: [`super::configmap`], [`leader`]),
//! the engine puts the recorded value back and drops the record.
//!
//! Where no policy object exists at all (the policy deleted), admission
//! applies [`restore`] to an object carrying records ([`undo_unclaimed`]).
//!
//! [`restore`]: a pure function from an object to the patch that puts every
//! governed field back to its release value and removes every record, for
//! `knative-ha-webhook restore` before the webhook is uninstalled (a PDB
//! left with the engine's `maxUnavailable` makes the release's own
//! `kubectl apply` fail: it re-adds `minAvailable`). Fields the engine owns
//! outright are removed: its marked anti-affinity terms
//! ([`super::affinity::MARKER_KEY`]) and the leader-election hash
//! annotation on the pod template.

mod deployment;
pub(crate) mod leader;
mod unclaimed;

pub use unclaimed::{WHY, carries_records, undo_unclaimed};

use serde_json::{Map, Value};

use super::patch::Patcher;
use super::{EngineError, Kind, LEADER_ELECTION_CONFIGMAP, Mutation, Outcome, Target};
use crate::policy::schema_check::show;

/// A field whose release value the engine records before changing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recorded {
    /// The object annotation holding the value's JSON text (`null`: unset).
    pub annotation: &'static str,
    /// The field (object keys).
    pub path: &'static [&'static str],
    /// The annotation holding the JSON text of the engine's last write of
    /// the field, where it keeps one: a field that differs from it was
    /// changed by someone else since, and is kept when the record goes.
    pub written: Option<&'static str>,
}

/// Deployment `spec.replicas`.
pub const REPLICAS: Recorded = Recorded {
    annotation: "knativeha.dev/original-replicas",
    path: &["spec", "replicas"],
    written: None,
};
/// Deployment `spec.strategy.rollingUpdate.maxUnavailable`.
pub const ROLLOUT_MAX_UNAVAILABLE: Recorded = Recorded {
    annotation: "knativeha.dev/original-rollout-max-unavailable",
    path: &["spec", "strategy", "rollingUpdate", "maxUnavailable"],
    written: None,
};
/// Deployment `spec.template.spec.topologySpreadConstraints`.
pub const TOPOLOGY_SPREAD: Recorded = Recorded {
    annotation: "knativeha.dev/original-topology-spread-constraints",
    path: &["spec", "template", "spec", "topologySpreadConstraints"],
    written: None,
};
/// HorizontalPodAutoscaler `spec.minReplicas` ([`super::hpa::ORIGINAL_MIN`]).
pub const HPA_MIN: Recorded = Recorded {
    annotation: super::hpa::ORIGINAL_MIN,
    path: &["spec", "minReplicas"],
    written: None,
};
/// HorizontalPodAutoscaler `spec.maxReplicas` ([`super::hpa::ORIGINAL_MAX`]).
pub const HPA_MAX: Recorded = Recorded {
    annotation: super::hpa::ORIGINAL_MAX,
    path: &["spec", "maxReplicas"],
    written: None,
};
/// `config-leader-election` keys the engine writes.
pub const LEADER_ELECTION_KEYS: [Recorded; 4] = [
    Recorded {
        annotation: "knativeha.dev/original-data-buckets",
        path: &["data", "buckets"],
        written: Some("knativeha.dev/written-data-buckets"),
    },
    Recorded {
        annotation: "knativeha.dev/original-data-lease-duration",
        path: &["data", "lease-duration"],
        written: Some("knativeha.dev/written-data-lease-duration"),
    },
    Recorded {
        annotation: "knativeha.dev/original-data-renew-deadline",
        path: &["data", "renew-deadline"],
        written: Some("knativeha.dev/written-data-renew-deadline"),
    },
    Recorded {
        annotation: "knativeha.dev/original-data-retry-period",
        path: &["data", "retry-period"],
        written: Some("knativeha.dev/written-data-retry-period"),
    },
];

/// Every annotation the engine keeps its records in (the originals and its
/// own last writes): what [`carries_records`] looks for and the view keeps.
pub const RECORD_ANNOTATIONS: [&str; 18] = [
    REPLICAS.annotation,
    ROLLOUT_MAX_UNAVAILABLE.annotation,
    TOPOLOGY_SPREAD.annotation,
    HPA_MIN.annotation,
    HPA_MAX.annotation,
    super::hpa::WRITTEN_MIN,
    super::hpa::WRITTEN_MAX,
    super::pdb::ORIGINAL,
    super::pdb::WRITTEN,
    ORIGINAL_DISABLE_HA,
    LEADER_ELECTION_KEYS[0].annotation,
    LEADER_ELECTION_KEYS[1].annotation,
    LEADER_ELECTION_KEYS[2].annotation,
    LEADER_ELECTION_KEYS[3].annotation,
    written(&LEADER_ELECTION_KEYS[0]),
    written(&LEADER_ELECTION_KEYS[1]),
    written(&LEADER_ELECTION_KEYS[2]),
    written(&LEADER_ELECTION_KEYS[3]),
];

const fn written(r: &Recorded) -> &'static str {
    match r.written {
        Some(w) => w,
        None => r.annotation,
    }
}

/// Deployment: whether the Knative container carried `--disable-ha` (JSON
/// `true`/`false`) before the engine first added or removed it.
pub const ORIGINAL_DISABLE_HA: &str = "knativeha.dev/original-disable-ha";

/// [`patcher`] for a change of `--disable-ha`: records whether the flag
/// was there.
pub(crate) fn flag_patcher<'p>(
    t: &Target<'_>,
    p: &'p mut Option<Patcher>,
) -> Result<&'p mut Patcher, EngineError> {
    let pt = p.get_or_insert_with(|| Patcher::new(t.object));
    if annotation(t.object, ORIGINAL_DISABLE_HA).is_none() {
        let path = ["metadata", "annotations", ORIGINAL_DISABLE_HA];
        super::check_parents(t, &path)?;
        let had = super::leader::carries_disable_ha(t.object);
        pt.set(&path, Value::String(had.to_string()))
            .map_err(|e| t.malformed(e))?;
    }
    Ok(pt)
}

/// The record of the `config-leader-election` data key `key` (none for a
/// key the engine does not write).
pub(crate) fn recorded_key(key: &str) -> Vec<&'static Recorded> {
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
pub(crate) fn recorded(object: &Value, r: &Recorded) -> Result<Option<Option<Value>>, String> {
    let Some(text) = annotation(object, r.annotation) else {
        return Ok(None);
    };
    let parsed = text
        .as_str()
        .and_then(|t| serde_json::from_str::<Value>(t).ok())
        .ok_or_else(|| {
            format!(
                "metadata.annotations.{} must be the JSON text of the recorded value, got {}",
                r.annotation,
                show(text)
            )
        })?;
    Ok(Some(Some(parsed).filter(|v| !v.is_null())))
}

/// Records `r`'s current value on the object in `p` (a copy of `t.object`)
/// unless the object already carries a record.
pub(crate) fn record(t: &Target<'_>, p: &mut Patcher, r: &Recorded) -> Result<(), EngineError> {
    if annotation(t.object, r.annotation).is_some() {
        return Ok(());
    }
    let original = super::lookup(t.object, r.path).unwrap_or(&Value::Null);
    let path = ["metadata", "annotations", r.annotation];
    super::check_parents(t, &path)?;
    p.set(&path, Value::String(original.to_string()))
        .map_err(|e| t.malformed(e))?;
    Ok(())
}

/// Notes in `p` that the engine wrote `value` to `r`'s field (for a field
/// whose last write is kept, [`Recorded::written`]).
pub(crate) fn note_written(
    t: &Target<'_>,
    p: &mut Patcher,
    r: &Recorded,
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
    r: &Recorded,
) -> Result<Option<Option<Value>>, String> {
    let Some(w) = r.written else {
        return Ok(None);
    };
    let Some(text) = annotation(object, w) else {
        return Ok(None);
    };
    let last = text
        .as_str()
        .and_then(|t| serde_json::from_str::<Value>(t).ok())
        .ok_or_else(|| {
            format!(
                "metadata.annotations.{w} must be the JSON text of the engine's last write, got {}",
                show(text)
            )
        })?;
    let last = Some(last).filter(|v| !v.is_null());
    let current = super::lookup(object, r.path).filter(|v| !v.is_null());
    Ok((current != last.as_ref()).then_some(last))
}

/// The patcher of `t` (created on first use) after recording `records`:
/// what a kind handler takes before it changes a recorded field.
pub(crate) fn patcher<'p>(
    t: &Target<'_>,
    p: &'p mut Option<Patcher>,
    records: &[&Recorded],
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
    r: &Recorded,
    changes: &mut Vec<String>,
) -> Result<(), EngineError> {
    if annotation(t.object, r.annotation).is_none() {
        return Ok(());
    }
    match put_back(t.object, p, r).map_err(|e| t.malformed(e))? {
        Some(PutBack::Restored(text)) => changes.push(t.change(format!(
            "{text} (the recorded release value: no policy setting asks for it any more)"
        ))),
        Some(PutBack::Theirs(text)) => {
            changes.push(t.change(format!("{text} (no policy setting asks for it any more)")))
        }
        None => {}
    }
    Ok(())
}

/// Removes `path`, then the parents below the top level that it left empty.
/// Safe on a view ([`super::view`]): a map the view filters keeps one of
/// the members it leaves out, as null, so a parent is empty in the view
/// only when it is empty in the object (a pod template's `metadata` still
/// holding the labels is never removed with the hash).
pub(super) fn remove_pruned(p: &mut Patcher, path: &[&str]) {
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

/// What [`put_back`] did, as the change text.
enum PutBack {
    /// The recorded value is back.
    Restored(String),
    /// The field was changed by someone else since the engine's last write:
    /// it is kept, only the records go.
    Theirs(String),
}

/// Puts the recorded value of `r` back in `p` (a copy of `object`, created
/// on first use) and drops the record, unless someone else changed the
/// field since the engine's last write ([`changed_since_written`]): then
/// the field is kept and only the records go. None when nothing is
/// recorded.
fn put_back(
    object: &Value,
    p: &mut Option<Patcher>,
    r: &Recorded,
) -> Result<Option<PutBack>, String> {
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
        return Ok(Some(PutBack::Theirs(format!(
            "{} {current} kept: changed since the engine wrote {}; records removed",
            r.path.join("."),
            last.as_ref().map_or("unset".to_string(), show)
        ))));
    }
    let current = super::lookup(&pt.doc, r.path)
        .filter(|v| !v.is_null())
        .cloned();
    let field = r.path.join(".");
    let text = match (&current, &original) {
        (a, b) if a == b => format!(
            "{field} {} kept (the release value), record {} removed",
            original.as_ref().map_or("unset".to_string(), show),
            r.annotation
        ),
        (_, None) => format!(
            "{field} {} -> removed",
            current.as_ref().map_or("unset".to_string(), show)
        ),
        (_, Some(v)) => format!(
            "{field} {} -> {}",
            current.as_ref().map_or("unset".to_string(), show),
            show(v)
        ),
    };
    match original {
        None => remove_pruned(pt, r.path),
        Some(v) => {
            pt.set(r.path, v)?;
        }
    }
    remove_pruned(pt, &["metadata", "annotations", r.annotation]);
    Ok(Some(PutBack::Restored(text)))
}

/// The object's kind, namespace and name for messages.
struct Named<'a> {
    kind: Kind,
    namespace: &'a str,
    name: &'a str,
}

impl Named<'_> {
    fn malformed(&self, message: impl Into<String>) -> EngineError {
        EngineError::Malformed {
            kind: self.kind.as_str().to_string(),
            namespace: self.namespace.to_string(),
            name: self.name.to_string(),
            message: message.into(),
        }
    }

    fn change(&self, what: impl std::fmt::Display) -> String {
        format!("{}/{}: {what}", self.kind.prefix(), self.name)
    }
}

/// Puts every governed field of `object` (in `namespace`, for messages)
/// back to its release value and removes the engine's records and its own
/// marked fields. The engine's counterpart with no policy: pure, and an
/// empty patch for an object the engine never changed (or already restored).
pub fn restore(namespace: &str, object: &Value) -> Result<Outcome, EngineError> {
    if !object.is_object() {
        return Err(EngineError::NotAnObject);
    }
    let Some(kind) = Kind::of(object) else {
        return Ok(Outcome::default());
    };
    let name = super::lookup(object, &["metadata", "name"])
        .and_then(Value::as_str)
        .unwrap_or("");
    let n = Named {
        kind,
        namespace,
        name,
    };
    let records: &[Recorded] = match kind {
        Kind::Deployment => &[REPLICAS, ROLLOUT_MAX_UNAVAILABLE, TOPOLOGY_SPREAD],
        Kind::HorizontalPodAutoscaler => &[HPA_MIN, HPA_MAX],
        // Its budget is recorded as one record ([`super::pdb::ORIGINAL`]).
        Kind::PodDisruptionBudget => &[],
        Kind::ConfigMap if name == LEADER_ELECTION_CONFIGMAP => &LEADER_ELECTION_KEYS,
        Kind::ConfigMap | Kind::Scale => return Ok(Outcome::default()),
    };
    let mut p: Option<Patcher> = None;
    let mut changes = Vec::new();
    for r in records {
        match put_back(object, &mut p, r).map_err(|e| n.malformed(e))? {
            Some(PutBack::Restored(text)) => changes.push(n.change(format!("{text} (restored)"))),
            Some(PutBack::Theirs(text)) => changes.push(n.change(text)),
            None => {}
        }
    }
    if kind == Kind::HorizontalPodAutoscaler
        && let Some(pt) = p.as_mut()
    {
        // The engine's record of its own last write goes with the originals.
        for key in [super::hpa::WRITTEN_MIN, super::hpa::WRITTEN_MAX] {
            remove_pruned(pt, &["metadata", "annotations", key]);
        }
    }
    if kind == Kind::PodDisruptionBudget {
        let restored = super::pdb::restore_original(object, &mut p).map_err(|e| n.malformed(e))?;
        let texts = restored.or_else(|| last_applied_pdb(object, &mut p).map(|t| vec![t]));
        changes.extend(texts.into_iter().flatten().map(|t| n.change(t)));
    }
    if kind == Kind::Deployment {
        for text in deployment::engine_owned(object, &mut p).map_err(|e| n.malformed(e))? {
            changes.push(n.change(text));
        }
    }
    Ok(match p {
        Some(p) if !p.ops.is_empty() => Outcome {
            mutation: Mutation {
                patch: json_patch::Patch(p.ops),
                changes,
            },
            object: Some(p.doc),
        },
        _ => Outcome::default(),
    })
}

/// kubectl's record of the last client-side apply.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A PDB without records (changed by an earlier webhook, which did not
/// record them) holding the one field of minAvailable/maxUnavailable that
/// its last client-side apply did not set: that apply's field back, the
/// other removed (what the next apply needs). The change text.
fn last_applied_pdb(object: &Value, p: &mut Option<Patcher>) -> Option<String> {
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
            return Some(format!(
                "spec.{other} {} -> removed, spec.{field} {} (restored from {LAST_APPLIED}: no record of the release value)",
                show(&current[other]),
                show(&value)
            ));
        }
    }
    None
}
