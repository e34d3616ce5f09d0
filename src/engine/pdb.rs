//! PodDisruptionBudgets: set the policy's field (minAvailable or
//! maxUnavailable, typed as the policy wrote it: 1 vs "50%") and remove the
//! other. A PDB belongs to a Deployment when it selects `app: <deployment>`
//! or is named `<deployment>-pdb`: PDBs of excluded Deployments are left
//! alone, and a `workloads[].podDisruptionBudget` replaces the global
//! setting for the PDB of that workload.
//!
//! A budget is judged at the replicas the Deployment runs after the engine
//! ([`disruption::replicas_of`]: the policy's count, which an HPA's
//! minReplicas is raised to, else what Knative ships, 1): one that would
//! allow no voluntary disruption there is not written, with a warning. What
//! the engine replaces is recorded once in [`ORIGINAL`], what it writes in
//! [`WRITTEN`]; when the budget it wrote would now block every drain (a
//! later policy no longer raises the replicas) and no policy setting takes
//! its place, the original comes back.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Map, Value, json};

use super::change::{Change, FieldChange, What};
use super::patch::Patcher;
use super::records::ANNOTATIONS;
use super::{EngineError, Fault, Handled, Target};
use crate::policy::Policy;
use crate::policy::disruption::{self, Fewest};
use crate::policy::schema_check::show;

pub use super::records::{PDB_ORIGINAL as ORIGINAL, PDB_WRITTEN as WRITTEN};

use super::created::{CREATED_FOR, MANAGED_BY, created_for, holds_both_fields, taken_over};
pub(crate) use super::created::{FIELDS, SPEC};

fn int_or_string(v: &IntOrString) -> Value {
    match v {
        IntOrString::Int(i) => json!(i),
        IntOrString::String(s) => json!(s),
    }
}

/// The budget fields of `spec` that are set.
fn budget(spec: Option<&Map<String, Value>>) -> Map<String, Value> {
    FIELDS
        .iter()
        .filter_map(|f| {
            let v = spec?.get(*f).filter(|v| !v.is_null())?;
            Some((f.to_string(), v.clone()))
        })
        .collect()
}

/// A budget recorded in annotation `key` (None when absent or unreadable).
fn recorded(t: &Target<'_>, key: &str) -> Result<Option<Map<String, Value>>, EngineError> {
    let annotations = t.object_at(ANNOTATIONS)?;
    Ok(annotations
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
        .and_then(|s| serde_json::from_str::<Map<String, Value>>(s).ok()))
}

/// The disruptions `fields` allow with `replicas` (None when not readable).
fn allowed(fields: &Map<String, Value>, replicas: i64) -> Option<i64> {
    let (field, value) = fields.iter().next()?;
    let value = match value {
        Value::Number(n) => IntOrString::Int(i32::try_from(n.as_i64()?).ok()?),
        Value::String(s) => IntOrString::String(s.clone()),
        _ => return None,
    };
    disruption::disruptions_allowed(field == "minAvailable", &value, replicas)
}

/// `with 1 replica (spec.replicas unset: ...)`.
fn at(runs: &Fewest) -> String {
    let noun = if runs.replicas == 1 {
        "replica"
    } else {
        "replicas"
    };
    format!("with {} {noun} ({})", runs.replicas, runs.source)
}

/// The policy's budget for the PDB of the Deployments `covers` accepts (a
/// workload's own `podDisruptionBudget`, else the global one): the field it
/// sets and its value.
pub(crate) fn setting(
    policy: &Policy,
    covers: impl Fn(&str) -> bool,
) -> Option<(&'static str, &IntOrString)> {
    let own = policy
        .spec
        .workloads
        .iter()
        .filter(|w| covers(&w.name))
        .find_map(|w| w.pod_disruption_budget.as_ref());
    let setting = own.or(policy.spec.pod_disruption_budget.as_ref())?;
    match (&setting.min_available, &setting.max_unavailable) {
        (Some(v), _) => Some(("minAvailable", v)),
        (None, Some(v)) => Some(("maxUnavailable", v)),
        _ => None,
    }
}

/// At admission of a PDB [`taken_over`]: the marks of a created budget go
/// (so the reconciler neither changes nor deletes the release's budget),
/// and with them the created budget's `maxUnavailable` where the release
/// set `minAvailable` beside it; the release's budget is then governed as
/// any budget Knative ships (at the reconciler's next pass, or the next
/// write).
fn hand_over(t: &Target<'_>) -> Result<super::Handled, super::EngineError> {
    let mut p = super::patch::Patcher::new(t.object);
    let mut fields = Vec::new();
    let deployment = created_for(t.object).unwrap_or_default().to_string();
    if holds_both_fields(t.object) {
        let created = super::lookup(t.object, &["spec", "maxUnavailable"]).cloned();
        p.remove(&["spec", "maxUnavailable"]);
        fields.push(super::FieldChange::removed(
            "spec.maxUnavailable",
            created
                .as_ref()
                .map_or(String::new(), crate::policy::schema_check::show),
        ));
    }
    super::records::remove_pruned(&mut p, &["metadata", "annotations", CREATED_FOR]);
    fields.push(super::FieldChange::removed(
        format!("metadata.annotations.{CREATED_FOR}"),
        deployment.clone(),
    ));
    super::records::remove_pruned(&mut p, &["metadata", "labels", MANAGED_BY.0]);
    let change = t.change(What::Fields(fields)).noted(format!(
        "handed over: a release applied its own budget over the one created for deployment/{deployment}; the release's budget stays, governed as Knative's own"
    ));
    Ok((Some(p), vec![change]))
}

pub(crate) fn mutate(t: &Target<'_>) -> Result<Handled, EngineError> {
    if taken_over(t.object) {
        return hand_over(t);
    }
    let [app, named] = t.pdb_deployments();
    let covers = |deployment: &str| Some(deployment) == app || Some(deployment) == named;
    if t.policy.spec.exclude.iter().any(|e| covers(e)) {
        return Ok((None, Vec::new()));
    }
    let wanted = setting(t.policy, covers);
    let deployment = app.or(named).unwrap_or(t.name);
    let runs = judged_replicas(t, deployment);
    let current = budget(t.object_at(SPEC)?);
    let mut changes = Vec::new();
    if let Some((field, value)) = wanted {
        let allows = disruption::disruptions_allowed(
            field == "minAvailable",
            value,
            i64::from(runs.replicas),
        );
        if let Some(a) = allows.filter(|a| *a > 0) {
            let scales = t.is_hpa_backed(deployment);
            return write_wanted(t, &current, (field, value), a, (&runs, scales));
        }
        // The release's budget may block there too (its 80% over the one
        // pod of an activator whose HPA opts out): say so, and what lets a
        // drain through.
        let n = i64::from(runs.replicas);
        let theirs = if !current.is_empty() && allowed(&current, n) == Some(0) {
            format!(
                "; the PDB's own {} allows none there either: every node drain blocks until a budget that allows one replaces it (maxUnavailable: 1 does at any count)",
                shown(&current)
            )
        } else {
            String::new()
        };
        changes.push(t.change(What::Warning(format!(
            "spec.{field} {} not written: {} it allows no voluntary disruption, so every node drain and cluster upgrade would block{theirs}",
            show(&int_or_string(value)),
            at(&runs)
        ))));
    }
    put_back(t, &current, wanted.is_none(), &runs, changes)
}

/// The replicas the budget is judged at: what the policy runs, or the 1
/// Knative ships where the policy cannot raise the Deployment's HPA.
pub(crate) fn judged_replicas(t: &Target<'_>, deployment: &str) -> Fewest {
    let unraised = if !t.is_hpa_backed(deployment) {
        None
    } else if t.hpa_skipped(deployment) {
        Some(format!(
            "its HPA carries the opt-out label {}, so the policy does not raise it",
            super::SKIP_LABEL
        ))
    } else if t.hpa_absent(deployment) {
        Some(format!(
            "deployment/{deployment} has no HorizontalPodAutoscaler for the policy to raise"
        ))
    } else {
        None
    };
    match unraised {
        Some(why) => Fewest {
            replicas: 1,
            source: format!("{why}: counted as the 1 Knative ships"),
        },
        None => disruption::replicas_of(&t.policy.spec, deployment),
    }
}

/// Writes the policy's budget (`field: value`, allowing `allows`
/// disruptions at the replicas judged).
fn write_wanted(
    t: &Target<'_>,
    current: &Map<String, Value>,
    (field, value): (&str, &IntOrString),
    allows: i64,
    (runs, scales): (&Fewest, bool),
) -> Result<Handled, EngineError> {
    match release_field(t, current)?.filter(|f| f != field) {
        // The release sets the other field: the policy's budget goes
        // there, at the replicas judged, so that a write that does not
        // pass the webhook (the release's own apply while it is down, a
        // GitOps sync) sets one field, never both.
        // Where an HPA scales the Deployment, judged from the fewest
        // replicas up, a percentage kept a percentage.
        Some(other) => {
            let n = i64::from(runs.replicas);
            let scaled = scales
                .then(|| disruption::in_field(field, value, &other, n))
                .flatten();
            let v = match &scaled {
                Some(v) => int_or_string(v),
                None if other == "minAvailable" => json!(n - allows),
                None => json!(allows),
            };
            let want = Map::from_iter([(other.clone(), v)]);
            let above = if scaled.is_some() { " and above" } else { "" };
            let note = format!(
                "the policy's {field} {} {}{above}, in the field the release sets",
                show(&int_or_string(value)),
                at(runs)
            );
            write(t, current, &want, false, Some(note))
        }
        None => {
            let want = Map::from_iter([(field.to_string(), int_or_string(value))]);
            write(t, current, &want, false, None)
        }
    }
}

/// Where the engine wrote the budget before: the release's back when the
/// engine's blocks drains or no policy setting asks for one, the engine's
/// own field dropped where someone set theirs beside it; `changes` so far
/// kept in front.
fn put_back(
    t: &Target<'_>,
    current: &Map<String, Value>,
    unset: bool,
    runs: &Fewest,
    mut changes: Vec<Change>,
) -> Result<Handled, EngineError> {
    let n = i64::from(runs.replicas);
    let (Some(original), Some(written)) = (recorded(t, ORIGINAL)?, recorded(t, WRITTEN)?) else {
        if unset && n > 1 && allowed(current, n) == Some(0) {
            // The policy raised the replicas, and the budget the release
            // ships still blocks every drain at the new count.
            changes.push(t.change(What::Warning(format!(
                "{} allows no voluntary disruption {}, so every node drain and cluster upgrade blocks; set spec.podDisruptionBudget (maxUnavailable: 1 lets a drain take one pod at a time)",
                shown(current),
                at(runs)
            ))));
        }
        return Ok((None, changes));
    };
    if written != *current {
        // Someone else changed it since: theirs stays. A field set beside
        // the engine's (a release's `kubectl apply` re-adding its
        // minAvailable) is theirs too, and the engine's goes: the API
        // server refuses a PDB holding both.
        let beside =
            current.len() > written.len() && written.iter().all(|(k, v)| current.get(k) == Some(v));
        if !beside {
            return Ok((None, changes));
        }
        let theirs: Map<String, Value> = current
            .iter()
            .filter(|(k, _)| !written.contains_key(*k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let why = format!(
            "the engine's {} goes: {} was set beside it since, and a PDB cannot hold both",
            shown(&written),
            shown(&theirs)
        );
        let (p, mut kept) = write(t, current, &theirs, true, Some(why))?;
        changes.append(&mut kept);
        return Ok((p, changes));
    }
    let why = if allowed(current, n).is_some_and(|a| a <= 0) {
        format!(
            "restored: the engine's {} allows no voluntary disruption {}",
            shown(current),
            at(runs)
        )
    } else if unset {
        // The policy dropped its budget setting: the recorded release value comes back.
        "restored: the recorded release value; no policy setting asks for a budget any more"
            .to_string()
    } else {
        // The policy's budget was held back; the engine's earlier one still allows a drain.
        return Ok((None, changes));
    };
    let (p, mut restored) = write(t, current, &original, true, Some(why))?;
    changes.append(&mut restored);
    Ok((p, changes))
}

/// The budget field the release sets: the recorded original's, else the
/// one field the PDB holds now (None for none, or both).
fn release_field(
    t: &Target<'_>,
    current: &Map<String, Value>,
) -> Result<Option<String>, EngineError> {
    let fields = match recorded(t, ORIGINAL)? {
        Some(original) => original,
        None => current.clone(),
    };
    Ok((fields.len() == 1)
        .then(|| fields.keys().next().cloned())
        .flatten())
}

/// `minAvailable 3` (the one field of a budget, as the user wrote it).
fn shown(fields: &Map<String, Value>) -> String {
    let parts: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{k} {}", show(v)))
        .collect();
    if parts.is_empty() {
        "empty budget".to_string()
    } else {
        parts.join(", ")
    }
}

/// A budget field's change: `spec.minAvailable unset -> 2`.
fn field_change(field: &str, before: Option<&Value>, after: &Value) -> FieldChange {
    FieldChange::new(
        format!("spec.{field}"),
        before.map_or("unset".to_string(), show),
        show(after),
    )
}

/// Makes the budget fields `want` (removing the others), saying why
/// (`reason`). With `restore`, `want` is the recorded original: the records
/// go then; otherwise they are kept up to date.
fn write(
    t: &Target<'_>,
    current: &Map<String, Value>,
    want: &Map<String, Value>,
    restore: bool,
    reason: Option<String>,
) -> Result<Handled, EngineError> {
    if current == want {
        return Ok((None, Vec::new()));
    }
    let mut p = Patcher::new(t.object);
    let mut fields = Vec::new();
    for (field, value) in want {
        let before = current.get(field);
        if before != Some(value) {
            p.set(&["spec", field], value.clone())
                .map_err(|e| t.malformed(e))?;
            fields.push(field_change(field, before, value));
        }
    }
    for (field, old) in current.iter().filter(|(f, _)| !want.contains_key(*f)) {
        p.remove(&["spec", field]);
        fields.push(FieldChange::removed(format!("spec.{field}"), show(old)));
    }
    super::check_parents(t, &["metadata", "annotations", ORIGINAL])?;
    if restore {
        super::records::remove_pruned(&mut p, &["metadata", "annotations", ORIGINAL]);
        super::records::remove_pruned(&mut p, &["metadata", "annotations", WRITTEN]);
    } else {
        if recorded(t, ORIGINAL)?.is_none() {
            let text = Value::Object(current.clone()).to_string();
            p.set(&["metadata", "annotations", ORIGINAL], json!(text))
                .map_err(|e| t.malformed(e))?;
        }
        let text = Value::Object(want.clone()).to_string();
        p.set(&["metadata", "annotations", WRITTEN], json!(text))
            .map_err(|e| t.malformed(e))?;
    }
    let change = t.change(What::Fields(fields));
    let change = match reason {
        Some(why) => change.noted(why),
        None => change,
    };
    Ok((Some(p), vec![change]))
}

/// For `restore`: the budget recorded in [`ORIGINAL`] back, whatever the
/// policy, and both records dropped. `None` when the PDB carries no record;
/// else the fields' changes (each a release value put back).
pub(crate) fn restore_original(
    object: &Value,
    p: &mut Option<Patcher>,
) -> Result<Option<Vec<FieldChange>>, Fault> {
    let annotations = super::lookup(object, ANNOTATIONS);
    let Some(text) = annotations.and_then(|a| a.get(ORIGINAL)) else {
        return Ok(None);
    };
    let original = text
        .as_str()
        .and_then(|t| serde_json::from_str::<Map<String, Value>>(t).ok())
        .ok_or_else(|| Fault::record(ORIGINAL, "the JSON text of the recorded budget", text))?;
    let current = budget(super::lookup(object, SPEC).and_then(Value::as_object));
    let pt = p.get_or_insert_with(|| Patcher::new(object));
    let mut fields = Vec::new();
    for (field, value) in &original {
        if current.get(field) != Some(value) {
            pt.set(&["spec", field], value.clone())?;
            fields.push(field_change(field, current.get(field), value));
        }
    }
    for (field, old) in current.iter().filter(|(f, _)| !original.contains_key(*f)) {
        pt.remove(&["spec", field]);
        fields.push(FieldChange::removed(format!("spec.{field}"), show(old)));
    }
    super::records::remove_pruned(pt, &["metadata", "annotations", ORIGINAL]);
    super::records::remove_pruned(pt, &["metadata", "annotations", WRITTEN]);
    Ok(Some(fields))
}
