//! Deployments: replicas (unless an HPA owns them or Knative scales them on
//! demand), pod anti-affinity ([`super::affinity`]), topology spread, the
//! rolling update under Required anti-affinity, and leader election
//! ([`super::leader`]: `--disable-ha`, the settings hash). Replicas, the
//! rollout's maxUnavailable and the spread constraints are recorded before
//! the first change and put back when no policy setting asks for them any
//! more ([`super::restore`]).

use serde_json::{Value, json};

use super::patch::Patcher;
use super::records::{
    self, REPLICAS as RECORDED_REPLICAS, ROLLOUT_MAX_UNAVAILABLE, TOPOLOGY_SPREAD,
};
use super::restore;
use super::{EngineError, Handled, Target, affinity, leader};
use crate::policy::validate::parse_percent;
use crate::policy::{AntiAffinityType, PodAntiAffinity, TopologySpread};

const REPLICAS: &[&str] = &["spec", "replicas"];
const MATCH_LABELS: &[&str] = &["spec", "selector", "matchLabels"];
const ANTI_AFFINITY: &[&str] = &["spec", "template", "spec", "affinity", "podAntiAffinity"];
const SPREAD: &[&str] = &["spec", "template", "spec", "topologySpreadConstraints"];
const STRATEGY_TYPE: &[&str] = &["spec", "strategy", "type"];
const MAX_UNAVAILABLE: &[&str] = &["spec", "strategy", "rollingUpdate", "maxUnavailable"];

/// The topologySpreadConstraints value the policy wants.
pub fn spread_value(list: &[TopologySpread], match_labels: &Value) -> Value {
    Value::Array(
        list.iter()
            .map(|c| {
                json!({
                    "labelSelector": {"matchLabels": match_labels},
                    "maxSkew": c.max_skew(),
                    "topologyKey": c.topology_key,
                    "whenUnsatisfiable": c.when_unsatisfiable().as_str(),
                })
            })
            .collect(),
    )
}

pub(crate) fn mutate(t: &Target<'_>) -> Result<Handled, EngineError> {
    let name = t.name;
    if t.is_excluded(name) {
        return Ok((None, Vec::new()));
    }
    let mut changes = Vec::new();
    let mut p: Option<Patcher> = None;

    let replicas = replicas(t, &mut p, &mut changes)?;
    let aa = t
        .workload(name)
        .and_then(|w| w.pod_anti_affinity.as_ref())
        .or(t.policy.spec.pod_anti_affinity.as_ref());
    let match_labels = t.object_at(MATCH_LABELS)?;
    for (k, v) in match_labels.into_iter().flatten() {
        if !v.is_string() {
            return Err(t.malformed(format!(
                "spec.selector.matchLabels.{k} must be a string, got {v}"
            )));
        }
    }
    if let Some(ml) = match_labels {
        anti_affinity(t, aa, ml, &mut p, &mut changes)?;
        spread(t, ml, &mut p, &mut changes)?;
    }
    if aa.is_some_and(|aa| aa.kind == AntiAffinityType::Required)
        && match_labels.is_some_and(|ml| !ml.is_empty())
    {
        rolling_update(t, replicas, &mut p, &mut changes)?;
    } else {
        records::undo(t, &mut p, &ROLLOUT_MAX_UNAVAILABLE, &mut changes)?;
    }
    if let Some(disable) = leader::want_flag(t, replicas) {
        leader::flag(t, &mut p, disable, &mut changes)?;
    }
    if t.policy.spec.leader_election.is_none() {
        restore::leader::undo(t, &mut p, replicas, &mut changes)?;
    }
    leader::hash(t, &mut p, &mut changes)?;
    Ok((p, changes))
}

/// Sets spec.replicas when the policy owns it; returns the count after the
/// mutation (unset counts as 1, as in Kubernetes).
fn replicas(
    t: &Target<'_>,
    p: &mut Option<Patcher>,
    changes: &mut Vec<String>,
) -> Result<i64, EngineError> {
    let current = t.int_at(REPLICAS)?;
    let want = if t.is_hpa_backed(t.name) || super::SCALED_ON_DEMAND.contains(&t.name) {
        None
    } else if t.ha_disabled() {
        Some(1)
    } else {
        t.wanted_replicas(t.name)
    };
    let Some(n) = want else {
        if !t.is_hpa_backed(t.name) && !super::SCALED_ON_DEMAND.contains(&t.name) {
            records::undo(t, p, &RECORDED_REPLICAS, changes)?;
        }
        let after = p.as_ref().map_or(t.object, |p| &p.doc);
        return Ok(super::lookup(after, REPLICAS)
            .and_then(Value::as_i64)
            .unwrap_or(1));
    };
    if current.unwrap_or(1) != i64::from(n) {
        let pt = records::patcher(t, p, &[&RECORDED_REPLICAS])?;
        pt.set(REPLICAS, json!(n)).map_err(|e| t.malformed(e))?;
        let before = current.map_or("unset".to_string(), |c| c.to_string());
        changes.push(t.change(format!("spec.replicas {before} -> {n}")));
    }
    Ok(i64::from(n))
}

fn anti_affinity(
    t: &Target<'_>,
    aa: Option<&PodAntiAffinity>,
    ml: &serde_json::Map<String, Value>,
    p: &mut Option<Patcher>,
    changes: &mut Vec<String>,
) -> Result<(), EngineError> {
    let current = super::lookup(t.object, ANTI_AFFINITY);
    if aa.is_none() && current.is_none() {
        return Ok(());
    }
    let Some(value) = affinity::wanted(aa, ml, current)
        .map_err(|e| t.malformed(format!("spec.template.spec.affinity.{e}")))?
    else {
        return Ok(());
    };
    super::check_parents(t, ANTI_AFFINITY)?;
    let pt = p.get_or_insert_with(|| Patcher::new(t.object));
    pt.set(ANTI_AFFINITY, value).map_err(|e| t.malformed(e))?;
    changes.push(
        t.change(match aa.filter(|a| a.kind != AntiAffinityType::None) {
            Some(aa) => format!(
                "pod anti-affinity set to {} on {}",
                aa.kind.as_str(),
                aa.topology_key()
            ),
            None => "pod anti-affinity: the policy's own term removed".to_string(),
        }),
    );
    Ok(())
}

fn spread(
    t: &Target<'_>,
    ml: &serde_json::Map<String, Value>,
    p: &mut Option<Patcher>,
    changes: &mut Vec<String>,
) -> Result<(), EngineError> {
    let Some(list) = t
        .workload(t.name)
        .and_then(|w| w.topology_spread_constraints.as_ref())
        .or(t.policy.spec.topology_spread_constraints.as_ref())
        .filter(|l| !l.is_empty() && !ml.is_empty())
    else {
        return records::undo(t, p, &TOPOLOGY_SPREAD, changes);
    };
    let value = spread_value(list, &Value::Object(ml.clone()));
    if super::lookup(t.object, SPREAD) == Some(&value) {
        return Ok(());
    }
    super::check_parents(t, SPREAD)?;
    let pt = records::patcher(t, p, &[&TOPOLOGY_SPREAD])?;
    pt.set(SPREAD, value).map_err(|e| t.malformed(e))?;
    let shown: Vec<String> = list
        .iter()
        .map(|c| {
            format!(
                "{} (maxSkew {}, {})",
                c.topology_key,
                c.max_skew(),
                c.when_unsatisfiable().as_str()
            )
        })
        .collect();
    changes.push(t.change(format!("topology spread set to {}", shown.join(", "))));
    Ok(())
}

/// Under Required anti-affinity a rolling update whose maxUnavailable
/// resolves to 0 (Kubernetes' default 25% with 3 or fewer replicas, or an
/// explicit 0) needs a spare node for every surge pod and hangs when
/// replicas equal nodes: set maxUnavailable to 1.
fn rolling_update(
    t: &Target<'_>,
    replicas: i64,
    p: &mut Option<Patcher>,
    changes: &mut Vec<String>,
) -> Result<(), EngineError> {
    if t.str_at(STRATEGY_TYPE)?
        .is_some_and(|s| s != "RollingUpdate")
    {
        return Ok(());
    }
    let current = super::lookup(t.object, MAX_UNAVAILABLE).filter(|v| !v.is_null());
    // Kubernetes rounds a maxUnavailable percentage down.
    let resolved = match current {
        // Saturating: the replicas come from the object as they are.
        None => replicas.saturating_mul(25) / 100,
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
        Some(Value::String(s)) => {
            parse_percent(s).map_or(1, |p| replicas.saturating_mul(i64::from(p)) / 100)
        }
        Some(_) => 1,
    };
    if resolved > 0 {
        return Ok(());
    }
    super::check_parents(t, MAX_UNAVAILABLE)?;
    let pt = records::patcher(t, p, &[&ROLLOUT_MAX_UNAVAILABLE])?;
    pt.set(MAX_UNAVAILABLE, json!(1))
        .map_err(|e| t.malformed(e))?;
    changes.push(t.change(format!(
        "spec.strategy.rollingUpdate.maxUnavailable {} -> 1 (Required anti-affinity with {replicas} replicas: a rollout must be able to stop a pod first)",
        current.map_or("unset (25%)".to_string(), crate::policy::schema_check::show)
    )));
    Ok(())
}
