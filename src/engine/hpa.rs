//! HorizontalPodAutoscalers (autoscaling/v2 and v1): the Knative Operator's
//! rule. With effective replicas N for the target Deployment, when
//! `minReplicas < N`: `minReplicas = N` and `maxReplicas` rises by the same
//! amount. Never lowers either.

use serde_json::json;

use super::patch::Patcher;
use super::{EngineError, Handled, Target};

const MIN: &[&str] = &["spec", "minReplicas"];
const MAX: &[&str] = &["spec", "maxReplicas"];

pub(crate) fn mutate(t: &Target<'_>) -> Result<Handled, EngineError> {
    let kind = t.str_at(&["spec", "scaleTargetRef", "kind"])?;
    let Some(target) = t.str_at(&["spec", "scaleTargetRef", "name"])? else {
        return Ok((None, Vec::new()));
    };
    if kind != Some("Deployment") || t.is_excluded(target) || t.ha_disabled() {
        return Ok((None, Vec::new()));
    }
    let Some(n) = t.wanted_replicas(target).map(i64::from) else {
        return Ok((None, Vec::new()));
    };
    let current_min = t.int_at(MIN)?;
    let Some(max) = t.int_at(MAX)? else {
        return Err(t.malformed("spec.maxReplicas is required"));
    };
    let min = current_min.unwrap_or(1);
    if min >= n {
        return Ok((None, Vec::new()));
    }
    let new_max = max.saturating_add(n - min).max(n);
    let mut p = Patcher::new(t.object);
    p.set(MIN, json!(n)).map_err(|e| t.malformed(e))?;
    let mut what = format!(
        "spec.minReplicas {} -> {n}",
        current_min.map_or("unset".to_string(), |m| m.to_string())
    );
    if new_max != max {
        p.set(MAX, json!(new_max)).map_err(|e| t.malformed(e))?;
        what.push_str(&format!(", spec.maxReplicas {max} -> {new_max}"));
    }
    Ok((Some(p), vec![t.change(what)]))
}
