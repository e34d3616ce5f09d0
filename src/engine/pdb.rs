//! PodDisruptionBudgets: set the policy's field (minAvailable or
//! maxUnavailable, typed as the policy wrote it: 1 vs "50%") and remove the
//! other. A PDB belongs to a Deployment when it selects `app: <deployment>`
//! or is named `<deployment>-pdb`: PDBs of excluded Deployments are left
//! alone, and a `workloads[].podDisruptionBudget` replaces the global
//! setting for the PDB of that workload. Both fields' release values are
//! recorded before the first change and put back when no policy setting
//! asks for a PDB any more ([`super::restore`]).

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

use super::patch::Patcher;
use super::restore::{self, PDB_MAX_UNAVAILABLE, PDB_MIN_AVAILABLE};
use super::{EngineError, Handled, Target};

const RECORDED: &[&restore::Recorded] = &[&PDB_MIN_AVAILABLE, &PDB_MAX_UNAVAILABLE];

/// No policy setting asks for this PDB: the recorded release values back.
fn undo(t: &Target<'_>) -> Result<Handled, EngineError> {
    let (mut p, mut changes) = (None, Vec::new());
    for r in RECORDED {
        restore::undo(t, &mut p, r, &mut changes)?;
    }
    Ok((p, changes))
}
use crate::policy::schema_check::show;

fn int_or_string(v: &IntOrString) -> Value {
    match v {
        IntOrString::Int(i) => json!(i),
        IntOrString::String(s) => json!(s),
    }
}

pub(crate) fn mutate(t: &Target<'_>) -> Result<Handled, EngineError> {
    let app = t
        .str_at(&["spec", "selector", "matchLabels", "app"])
        .ok()
        .flatten();
    let covers = |deployment: &str| {
        Some(deployment) == app || t.name.strip_suffix("-pdb") == Some(deployment)
    };
    if t.policy.spec.exclude.iter().any(|e| covers(e)) {
        return Ok((None, Vec::new()));
    }
    let own = t
        .policy
        .spec
        .workloads
        .iter()
        .filter(|w| covers(&w.name))
        .find_map(|w| w.pod_disruption_budget.as_ref());
    let Some(pdb) = own.or(t.policy.spec.pod_disruption_budget.as_ref()) else {
        return undo(t);
    };
    let (field, value, other) = match (&pdb.min_available, &pdb.max_unavailable) {
        (Some(v), _) => ("minAvailable", int_or_string(v), "maxUnavailable"),
        (None, Some(v)) => ("maxUnavailable", int_or_string(v), "minAvailable"),
        (None, None) => return undo(t),
    };
    let spec = t.object_at(&["spec"])?;
    let current = spec.and_then(|s| s.get(field)).filter(|v| !v.is_null());
    let current_other = spec.and_then(|s| s.get(other));
    let mut parts = Vec::new();
    let mut p: Option<Patcher> = None;
    if current != Some(&value) {
        let pt = restore::patcher(t, &mut p, RECORDED)?;
        pt.set(&["spec", field], value.clone())
            .map_err(|e| t.malformed(e))?;
        parts.push(format!(
            "spec.{field} {} -> {}",
            current.map_or("unset".to_string(), show),
            show(&value)
        ));
    }
    if let Some(old) = current_other {
        let pt = restore::patcher(t, &mut p, RECORDED)?;
        pt.remove(&["spec", other]);
        parts.push(format!("spec.{other} {} -> removed", show(old)));
    }
    if parts.is_empty() {
        return Ok((None, Vec::new()));
    }
    Ok((p, vec![t.change(parts.join(", "))]))
}
