//! PodDisruptionBudgets: set the policy's field (minAvailable or
//! maxUnavailable, typed as the policy wrote it: 1 vs "50%") and remove the
//! other. PDBs of excluded Deployments (named `<deployment>-pdb` or
//! selecting `app: <deployment>`) are left alone.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Value, json};

use super::patch::Patcher;
use super::{EngineError, Handled, Target};
use crate::policy::schema_check::show;

fn int_or_string(v: &IntOrString) -> Value {
    match v {
        IntOrString::Int(i) => json!(i),
        IntOrString::String(s) => json!(s),
    }
}

pub(crate) fn mutate(t: &Target<'_>) -> Result<Handled, EngineError> {
    let Some(pdb) = &t.policy.spec.pod_disruption_budget else {
        return Ok((None, Vec::new()));
    };
    let app = t
        .str_at(&["spec", "selector", "matchLabels", "app"])
        .ok()
        .flatten();
    let excluded = t
        .policy
        .spec
        .exclude
        .iter()
        .any(|e| Some(e.as_str()) == app || t.name.strip_suffix("-pdb") == Some(e.as_str()));
    if excluded {
        return Ok((None, Vec::new()));
    }
    let (field, value, other) = match (&pdb.min_available, &pdb.max_unavailable) {
        (Some(v), _) => ("minAvailable", int_or_string(v), "maxUnavailable"),
        (None, Some(v)) => ("maxUnavailable", int_or_string(v), "minAvailable"),
        (None, None) => return Ok((None, Vec::new())),
    };
    let spec = t.object_at(&["spec"])?;
    let current = spec.and_then(|s| s.get(field)).filter(|v| !v.is_null());
    let current_other = spec.and_then(|s| s.get(other));
    let mut parts = Vec::new();
    let mut p: Option<Patcher> = None;
    if current != Some(&value) {
        let pt = p.get_or_insert_with(|| Patcher::new(t.object));
        pt.set(&["spec", field], value.clone())
            .map_err(|e| t.malformed(e))?;
        parts.push(format!(
            "spec.{field} {} -> {}",
            current.map_or("unset".to_string(), show),
            show(&value)
        ));
    }
    if let Some(old) = current_other {
        let pt = p.get_or_insert_with(|| Patcher::new(t.object));
        pt.remove(&["spec", other]);
        parts.push(format!("spec.{other} {} -> removed", show(old)));
    }
    if parts.is_empty() {
        return Ok((None, Vec::new()));
    }
    Ok((p, vec![t.change(parts.join(", "))]))
}
