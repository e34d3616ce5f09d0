//! PodDisruptionBudgets (docs/policy.md says what and why): the policy's
//! budget (a workload's `podDisruptionBudget` replaces the global one for
//! the PDB of that workload) goes into the field the release sets, so a
//! write that does not pass the webhook never makes a PDB hold both. It is
//! judged at the replicas the Deployment runs after the engine
//! (`judged_replicas`): one that would allow no voluntary disruption there
//! is not written, with a warning. What the engine replaces is recorded
//! once in [`ORIGINAL`], what it writes in [`WRITTEN`]; when the budget it
//! wrote would now block every drain and no policy setting takes its place,
//! the original comes back.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Map, Value, json};

use super::change::{Change, FieldChange, What};
use super::patch::{PatchError, Patcher};
use super::records::{self, ANNOTATIONS};
use super::{EngineError, Fault, Handled, Target};
use crate::policy::Policy;
use crate::policy::disruption::{self, Fewest};
use crate::policy::schema_check::show;

pub use super::records::{PDB_ORIGINAL as ORIGINAL, PDB_WRITTEN as WRITTEN};

use super::created::taken_over;
use super::created::{CREATED_FOR, MANAGED_BY, SPEC, budget, created_for, holds_both_fields};

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
/// with its `maxUnavailable` where the release set `minAvailable` beside
/// it; the release's budget is then governed as Knative's own.
fn hand_over(t: &Target<'_>) -> Result<Handled, EngineError> {
    let mut p = Patcher::new(t.object);
    let mut fields = Vec::new();
    let deployment = created_for(t.object).unwrap_or_default().to_string();
    if holds_both_fields(t.object) {
        let created =
            super::lookup(t.object, &["spec", "maxUnavailable"]).map_or(String::new(), show);
        p.remove(&["spec", "maxUnavailable"]);
        fields.push(FieldChange::removed("spec.maxUnavailable", created));
    }
    p.remove_annotation(CREATED_FOR);
    fields.push(FieldChange::removed(
        format!("metadata.annotations.{CREATED_FOR}"),
        deployment.clone(),
    ));
    p.remove_pruned(&["metadata", "labels", MANAGED_BY.0]);
    let change = t.change(What::Fields(fields)).noted(format!(
        "handed over: a release applied its own budget over the one created for deployment/{deployment}; the release's budget stays, governed as Knative's own"
    ));
    Ok((Some(p), vec![change]))
}

const PDB_APP: &[&str] = &["spec", "selector", "matchLabels", "app"];

/// The Deployments a PDB named `name` belongs to: the one its selector's
/// `app` label names and the one it is named after (`<deployment>-pdb`).
pub(crate) fn deployments<'a>(name: &'a str, pdb: &'a Value) -> [Option<&'a str>; 2] {
    let app = super::lookup(pdb, PDB_APP).and_then(Value::as_str);
    [app, name.strip_suffix("-pdb")]
}

pub(crate) fn mutate(t: &Target<'_>) -> Result<Handled, EngineError> {
    if taken_over(t.object) {
        return hand_over(t);
    }
    let [app, named] = deployments(t.name, t.object);
    let covers = |deployment: &str| Some(deployment) == app || Some(deployment) == named;
    if t.policy.spec.exclude.iter().any(|e| covers(e)) {
        return Ok((None, Vec::new()));
    }
    let wanted = setting(t.policy, covers);
    let deployment = app.or(named).unwrap_or(t.name);
    let runs = judged_replicas(t, deployment);
    let current = budget(t.object_at(SPEC)?);
    let n = i64::from(runs.replicas);
    let mut changes = Vec::new();
    if let Some((field, value)) = wanted {
        let allows = disruption::disruptions_allowed(field == "minAvailable", value, n);
        if let Some(a) = allows.filter(|a| *a > 0) {
            let scales = t.is_hpa_backed(deployment);
            return write_wanted(t, &current, (field, value), a, (&runs, scales));
        }
        // The release's budget may block there too (its 80% over the one
        // pod of an activator whose HPA opts out): say so, and what lets a
        // drain through.
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
            show(&json!(value)),
            at(&runs)
        ))));
    }
    put_back(t, &current, wanted.is_none(), &runs, changes)
}

/// The replicas the budget is judged at: what the policy runs, or the 1
/// Knative ships where the policy cannot raise the Deployment's HPA.
pub(crate) fn judged_replicas(t: &Target<'_>, deployment: &str) -> Fewest {
    let why = if t.hpa_skipped(deployment) {
        format!(
            "its HPA carries the opt-out label {}, so the policy does not raise it",
            super::SKIP_LABEL
        )
    } else if t.is_hpa_backed(deployment) && t.hpa_absent(deployment) {
        format!("deployment/{deployment} has no HorizontalPodAutoscaler for the policy to raise")
    } else {
        return disruption::replicas_of(&t.policy.spec, deployment);
    };
    Fewest {
        replicas: 1,
        source: format!("{why}: counted as the 1 Knative ships"),
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
    let (want, note) = match release_field(t, current)?.filter(|f| f != field) {
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
                Some(v) => json!(v),
                None if other == "minAvailable" => json!(n - allows),
                None => json!(allows),
            };
            let above = if scaled.is_some() { " and above" } else { "" };
            let note = format!(
                "the policy's {field} {} {}{above}, in the field the release sets",
                show(&json!(value)),
                at(runs)
            );
            (Map::from_iter([(other, v)]), Some(note))
        }
        None => (Map::from_iter([(field.to_string(), json!(value))]), None),
    };
    write(t, current, &want, false, note)
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
    let (want, why) = if written != *current {
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
        (theirs, why)
    } else if allowed(current, n).is_some_and(|a| a <= 0) {
        let why = format!(
            "restored: the engine's {} allows no voluntary disruption {}",
            shown(current),
            at(runs)
        );
        (original, why)
    } else if unset {
        // The policy dropped its budget setting: the recorded release value comes back.
        let why =
            "restored: the recorded release value; no policy setting asks for a budget any more";
        (original, why.to_string())
    } else {
        // The policy's budget was held back; the engine's earlier one still allows a drain.
        return Ok((None, changes));
    };
    let (p, more) = write(t, current, &want, true, Some(why))?;
    changes.extend(more);
    Ok((p, changes))
}

/// The budget field the release sets: the recorded original's, else the
/// one field the PDB holds now (None for none, or both).
fn release_field(
    t: &Target<'_>,
    current: &Map<String, Value>,
) -> Result<Option<String>, EngineError> {
    let fields = recorded(t, ORIGINAL)?.unwrap_or_else(|| current.clone());
    Ok(fields.keys().next().filter(|_| fields.len() == 1).cloned())
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

/// Makes the budget fields in `p` `want`, removing the others of
/// `current`: the fields' changes (`spec.minAvailable unset -> 2`).
fn set_budget(
    p: &mut Patcher,
    current: &Map<String, Value>,
    want: &Map<String, Value>,
) -> Result<Vec<FieldChange>, PatchError> {
    let mut fields = Vec::new();
    for (field, value) in want {
        let before = current.get(field);
        if before != Some(value) {
            p.set(&["spec", field], value.clone())?;
            let field = format!("spec.{field}");
            fields.push(FieldChange::new(field, records::shown(before), show(value)));
        }
    }
    for (field, old) in current.iter().filter(|(f, _)| !want.contains_key(*f)) {
        p.remove(&["spec", field]);
        fields.push(FieldChange::removed(format!("spec.{field}"), show(old)));
    }
    Ok(fields)
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
    let fields = set_budget(&mut p, current, want).map_err(|e| t.malformed(e))?;
    if restore {
        // (Records were read, so the annotations are an object.)
        p.remove_annotation(ORIGINAL);
        p.remove_annotation(WRITTEN);
    } else {
        if recorded(t, ORIGINAL)?.is_none() {
            records::annotate(t, &mut p, ORIGINAL, json!(current).to_string())?;
        }
        records::annotate(t, &mut p, WRITTEN, json!(want).to_string())?;
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
    let want = "the JSON text of the recorded budget";
    let Some(original) = records::parsed::<Map<String, Value>>(object, ORIGINAL, want)? else {
        return Ok(None);
    };
    let current = budget(super::lookup(object, SPEC).and_then(Value::as_object));
    let pt = p.get_or_insert_with(|| Patcher::new(object));
    let fields = set_budget(pt, &current, &original)?;
    pt.remove_annotation(ORIGINAL);
    pt.remove_annotation(WRITTEN);
    Ok(Some(fields))
}
