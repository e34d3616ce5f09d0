//! Deployments: replicas (unless an HPA owns them or Knative scales them on
//! demand), pod anti-affinity ([`super::affinity`]), topology spread, the
//! rolling update under Required anti-affinity, and leader election
//! ([`super::leader`]: `--disable-ha`, the settings hash). Replicas, the
//! rollout's maxUnavailable and the spread constraints are recorded before
//! the first change and put back when no policy setting asks for them any
//! more ([`super::restore`]).

use serde_json::{Value, json};

use super::affinity::{ANTI_AFFINITY, MATCH_LABELS};
use super::change::{Change, FieldChange, Spread, TermOwner, What};
use super::patch::Patcher;
use super::records::{
    self, PRIORITY_CLASS, REPLICAS as RECORDED_REPLICAS, ROLLOUT_MAX_UNAVAILABLE, TOPOLOGY_SPREAD,
};
use super::restore;
use super::{EngineError, Fault, Handled, Target, affinity, leader};
use crate::knative;
use crate::policy::validate::parse_percent;
use crate::policy::{AntiAffinityType, PodAntiAffinity};

const REPLICAS: &[&str] = &["spec", "replicas"];
const SPREAD: &[&str] = &["spec", "template", "spec", "topologySpreadConstraints"];
const MAX_UNAVAILABLE: &[&str] = ROLLOUT_MAX_UNAVAILABLE.path;

use super::affinity::POD_TEMPLATE_HASH;

/// The anti-affinity the engine writes: the policy's, except Preferred for
/// Required on a Deployment an HPA scales (its replicas beyond the number
/// of domains would stay Pending), with why.
fn effective_anti_affinity(
    t: &Target<'_>,
    aa: Option<&PodAntiAffinity>,
) -> (Option<PodAntiAffinity>, Option<String>) {
    match aa {
        Some(a) if a.kind == AntiAffinityType::Required && t.is_hpa_backed(t.name) => {
            let preferred = PodAntiAffinity {
                kind: AntiAffinityType::Preferred,
                ..a.clone()
            };
            let why = format!(
                "not the policy's Required: an HPA scales this Deployment, and its replicas beyond the number of {} domains would stay Pending",
                a.topology_key()
            );
            (Some(preferred), Some(why))
        }
        other => (other.cloned(), None),
    }
}

/// A replicas write is unsafe without the pod template's where the
/// Deployment keeps `--disable-ha` and the engine leaves it above 1 replica
/// (several replicas without a leader).
pub(crate) fn held_with_template(
    _: &str,
    object: &Value,
    mutated: Option<&Value>,
) -> Option<&'static str> {
    let replicas = mutated.and_then(|o| o.pointer("/spec/replicas"));
    (leader::carries_disable_ha(object) && replicas.and_then(Value::as_i64).is_some_and(|r| r != 1))
        .then_some("/spec/replicas")
}

pub(crate) fn mutate(t: &Target<'_>) -> Result<Handled, EngineError> {
    let name = t.name;
    if t.is_excluded(name) {
        return Ok((None, Vec::new()));
    }
    let mut changes = Vec::new();
    let mut p: Option<Patcher> = None;

    let replicas = replicas(t, &mut p, &mut changes)?;
    let asked = t
        .workload(name)
        .and_then(|w| w.pod_anti_affinity.as_ref())
        .or(t.policy.spec.pod_anti_affinity.as_ref());
    let (aa, downgraded) = effective_anti_affinity(t, asked);
    let aa = aa.as_ref();
    let match_labels = t.object_at(MATCH_LABELS)?;
    for (k, v) in match_labels.into_iter().flatten() {
        if !v.is_string() {
            return Err(t.malformed(Fault::Mistyped {
                path: format!("spec.selector.matchLabels.{k}"),
                want: "a string",
                got: v.to_string(),
            }));
        }
    }
    if let Some(ml) = match_labels {
        anti_affinity(t, aa, downgraded.as_deref(), ml, &mut p, &mut changes)?;
        spread(t, ml, &mut p, &mut changes)?;
    }
    let required = aa
        .filter(|aa| aa.kind == AntiAffinityType::Required)
        .filter(|_| match_labels.is_some_and(|ml| !ml.is_empty()));
    if let Some(aa) = required
        && replicas > 1
    {
        rolling_update(t, replicas, &mut p, &mut changes)?;
        let key = aa.topology_key();
        changes.push(t.change(What::Warning(format!(
            "Required anti-affinity on {key} puts each of the {replicas} replicas in its own {key} domain: with {replicas} domains or fewer, a replica stays Pending when one is lost or drained, and every later rollout waits for it (a topologySpreadConstraints entry with DoNotSchedule keeps replicas apart without stranding them)"
        ))));
    } else {
        records::undo(t, &mut p, &ROLLOUT_MAX_UNAVAILABLE, &mut changes)?;
    }
    priority_class(t, &mut p, &mut changes)?;
    if let Some(disable) = leader::want_flag(t, replicas) {
        leader::flag(t, &mut p, disable, &mut changes)?;
    }
    if t.policy.spec.leader_election.is_none() {
        restore::leader::undo(t, &mut p, replicas, &mut changes)?;
    }
    leader::hash(t, replicas, &mut p, &mut changes)?;
    Ok((p, changes))
}

/// Sets spec.replicas when the policy owns it; returns the count after the
/// mutation (unset counts as 1, as in Kubernetes).
fn replicas(
    t: &Target<'_>,
    p: &mut Option<Patcher>,
    changes: &mut Vec<Change>,
) -> Result<i64, EngineError> {
    let current = t.int_at(REPLICAS)?;
    let owned = !t.is_hpa_backed(t.name) && !knative::is_scaled_on_demand(t.name);
    let want = match owned && t.ha_disabled() {
        true => Some(1),
        false => t.wanted_replicas(t.name).filter(|_| owned),
    };
    let Some(n) = want else {
        if owned {
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
        changes.push(t.change(What::field(REPLICAS.join("."), before, n.to_string())));
    }
    Ok(i64::from(n))
}

fn anti_affinity(
    t: &Target<'_>,
    aa: Option<&PodAntiAffinity>,
    downgraded: Option<&str>,
    ml: &serde_json::Map<String, Value>,
    p: &mut Option<Patcher>,
    changes: &mut Vec<Change>,
) -> Result<(), EngineError> {
    let current = super::lookup(t.object, ANTI_AFFINITY);
    let Some(value) = affinity::wanted(aa, ml, current).map_err(|e| t.malformed(e))? else {
        return Ok(());
    };
    super::check_parents(t, ANTI_AFFINITY)?;
    let pt = p.get_or_insert_with(|| Patcher::new(t.object));
    affinity::put(pt, value).map_err(|e| t.malformed(e))?;
    changes.push(
        t.change(match aa.filter(|a| a.kind != AntiAffinityType::None) {
            Some(aa) => What::AntiAffinitySet {
                strength: aa.kind.as_str(),
                downgraded: downgraded.map(str::to_string),
                topology_key: aa.topology_key().to_string(),
            },
            None => What::AntiAffinityRemoved(TermOwner::Policy),
        }),
    );
    Ok(())
}

fn spread(
    t: &Target<'_>,
    ml: &serde_json::Map<String, Value>,
    p: &mut Option<Patcher>,
    changes: &mut Vec<Change>,
) -> Result<(), EngineError> {
    let Some(list) = t
        .workload(t.name)
        .and_then(|w| w.topology_spread_constraints.as_ref())
        .or(t.policy.spec.topology_spread_constraints.as_ref())
        .filter(|l| !l.is_empty() && !ml.is_empty())
    else {
        return records::undo(t, p, &TOPOLOGY_SPREAD, changes);
    };
    let wanted: Vec<Spread> = list
        .iter()
        .map(|c| Spread {
            topology_key: c.topology_key.clone(),
            max_skew: c.max_skew(),
            when_unsatisfiable: c.when_unsatisfiable().as_str(),
            node_taints_policy: c.node_taints_policy().as_str(),
        })
        .collect();
    // Each constraint counts only the pods of one ReplicaSet, so a
    // rollout's new pods are spread on their own instead of around the old
    // ones they replace; `nodeTaintsPolicy: Honor` (the default) leaves out
    // nodes with taints the pods do not tolerate, so a lost zone stops
    // counting as a domain.
    let value: Value = wanted
        .iter()
        .map(|s| {
            json!({
                "labelSelector": {"matchLabels": ml},
                "matchLabelKeys": [POD_TEMPLATE_HASH],
                "maxSkew": s.max_skew,
                "nodeTaintsPolicy": s.node_taints_policy,
                "topologyKey": s.topology_key,
                "whenUnsatisfiable": s.when_unsatisfiable,
            })
        })
        .collect();
    if super::lookup(t.object, SPREAD) == Some(&value) {
        return Ok(());
    }
    records::write(t, p, &TOPOLOGY_SPREAD, value)?;
    changes.push(t.change(What::SpreadSet(wanted)));
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
    changes: &mut Vec<Change>,
) -> Result<(), EngineError> {
    if !t.rolls_updates()? {
        return Ok(());
    }
    let current = super::lookup(t.object, MAX_UNAVAILABLE).filter(|v| !v.is_null());
    // Kubernetes rounds a maxUnavailable percentage down; saturating: the
    // replicas come from the object as they are.
    let of_replicas =
        |s: &str| parse_percent(s).map_or(1, |p| replicas.saturating_mul(i64::from(p)) / 100);
    let resolved = match current {
        None => of_replicas(records::ROLLING_UPDATE_DEFAULT),
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
        Some(Value::String(s)) => of_replicas(s),
        Some(_) => 1,
    };
    if resolved > 0 {
        return Ok(());
    }
    records::write(t, p, &ROLLOUT_MAX_UNAVAILABLE, json!(1))?;
    let field = What::field(
        MAX_UNAVAILABLE.join("."),
        records::show_rolling(current),
        "1",
    );
    changes.push(t.change(field).noted(format!(
        "Required anti-affinity with {replicas} replicas: a rollout must be able to stop a pod before its replacement can schedule"
    )));
    Ok(())
}

const PRIORITY_CLASS_PATH: &[&str] = &["spec", "template", "spec", "priorityClassName"];

/// The pods' PriorityClass, when the policy names one (the workload's,
/// else the global one); recorded, and put back when none does.
fn priority_class(
    t: &Target<'_>,
    p: &mut Option<Patcher>,
    changes: &mut Vec<Change>,
) -> Result<(), EngineError> {
    let Some(want) = t
        .workload(t.name)
        .and_then(|w| w.priority_class_name.as_deref())
        .or(t.policy.spec.priority_class_name.as_deref())
    else {
        return records::undo(t, p, &PRIORITY_CLASS, changes);
    };
    if t.facts
        .priority_classes
        .is_some_and(|known| !known.contains(want))
    {
        // Rolled onto it, the Deployment could create no pod: held back,
        // and one the engine wrote before goes back to the release's.
        changes.push(t.change(What::Warning(format!(
            "{} {want:?} not written: no PriorityClass {want} exists in the cluster, and pods naming one that does not are refused (create it, or fix the policy's name)",
            PRIORITY_CLASS_PATH.join(".")
        ))));
        return records::undo(t, p, &PRIORITY_CLASS, changes);
    }
    let current = t.str_at(PRIORITY_CLASS_PATH)?;
    if current == Some(want) {
        return Ok(());
    }
    records::write(t, p, &PRIORITY_CLASS, json!(want))?;
    let field = What::Fields(vec![FieldChange::at(
        PRIORITY_CLASS_PATH,
        current.unwrap_or("unset"),
        Some(want.to_string()),
    )]);
    changes.push(
        t.change(field)
            .noted("the PriorityClass must exist: pods naming one that does not are refused"),
    );
    Ok(())
}
