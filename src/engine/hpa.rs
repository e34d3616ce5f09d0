//! HorizontalPodAutoscalers (autoscaling/v2 and v1): the Knative Operator's
//! rule, computed from the values the webhook first saw. Those are recorded
//! once, in the annotations [`ORIGINAL_MIN`] / [`ORIGINAL_MAX`], when the
//! engine first changes the HPA. With effective replicas N for the target
//! Deployment and originals (min, max): when `min < N`, `minReplicas = N`
//! and `maxReplicas = max + (N - min)`; otherwise the originals. So lowering
//! or removing the policy (or turning leader election off) brings the HPA
//! back down.

use serde_json::{Value, json};

use super::patch::Patcher;
use super::{EngineError, Handled, Target};

const MIN: &[&str] = &["spec", "minReplicas"];
const MAX: &[&str] = &["spec", "maxReplicas"];
pub const ORIGINAL_MIN: &str = "knativeha.dev/original-min-replicas";
pub const ORIGINAL_MAX: &str = "knativeha.dev/original-max-replicas";

fn recorded(t: &Target<'_>, key: &str) -> Result<Option<i64>, EngineError> {
    let annotations = t.object_at(&["metadata", "annotations"])?;
    Ok(annotations
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|n| *n >= 0))
}

pub(crate) fn mutate(t: &Target<'_>) -> Result<Handled, EngineError> {
    let kind = t.str_at(&["spec", "scaleTargetRef", "kind"])?;
    let Some(target) = t.str_at(&["spec", "scaleTargetRef", "name"])? else {
        return Ok((None, Vec::new()));
    };
    if kind != Some("Deployment") || t.is_excluded(target) {
        return Ok((None, Vec::new()));
    }
    let current_min = t.int_at(MIN)?;
    let Some(max) = t.int_at(MAX)? else {
        return Err(t.malformed("spec.maxReplicas is required"));
    };
    let min = current_min.unwrap_or(1);
    let (rec_min, rec_max) = (recorded(t, ORIGINAL_MIN)?, recorded(t, ORIGINAL_MAX)?);
    let (orig_min, orig_max) = match (rec_min, rec_max) {
        (Some(a), Some(b)) => (a, b),
        _ => (min, max),
    };
    let n = if t.ha_disabled() {
        None
    } else {
        t.wanted_replicas(target).map(i64::from)
    };
    let (want_min, want_max) = match n {
        Some(n) if n > orig_min => (n, orig_max.saturating_add(n - orig_min).max(n)),
        _ => (orig_min, orig_max),
    };
    if want_min == min && want_max == max {
        return Ok((None, Vec::new()));
    }
    let mut p = Patcher::new(t.object);
    if rec_min.is_none() || rec_max.is_none() {
        super::check_parents(t, &["metadata", "annotations", ORIGINAL_MIN])?;
        for (key, v) in [(ORIGINAL_MIN, orig_min), (ORIGINAL_MAX, orig_max)] {
            p.set(&["metadata", "annotations", key], json!(v.to_string()))
                .map_err(|e| t.malformed(e))?;
        }
    }
    let mut parts = Vec::new();
    if want_min != min || current_min.is_none() {
        p.set(MIN, json!(want_min)).map_err(|e| t.malformed(e))?;
        parts.push(format!(
            "spec.minReplicas {} -> {want_min}",
            current_min.map_or("unset".to_string(), |m| m.to_string())
        ));
    }
    if want_max != max {
        p.set(MAX, json!(want_max)).map_err(|e| t.malformed(e))?;
        parts.push(format!("spec.maxReplicas {max} -> {want_max}"));
    }
    let from = format!("from the original {orig_min}/{orig_max}");
    Ok((
        Some(p),
        vec![t.change(format!("{} ({from})", parts.join(", ")))],
    ))
}
