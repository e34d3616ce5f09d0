//! Deployments: replicas (unless an HPA owns them), pod anti-affinity and
//! `--disable-ha`.

use serde_json::{Value, json};

use super::patch::Patcher;
use super::{DISABLE_HA_DEPLOYMENTS, DISABLE_HA_FLAG, EngineError, Handled, Target};
use crate::policy::{AntiAffinityType, PodAntiAffinity, TopologySpread};

const REPLICAS: &[&str] = &["spec", "replicas"];
const MATCH_LABELS: &[&str] = &["spec", "selector", "matchLabels"];
const ANTI_AFFINITY: &[&str] = &["spec", "template", "spec", "affinity", "podAntiAffinity"];
const CONTAINERS: &[&str] = &["spec", "template", "spec", "containers"];
const SPREAD: &[&str] = &["spec", "template", "spec", "topologySpreadConstraints"];

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

fn is_disable_ha_arg(arg: &str) -> bool {
    let flag = arg.split('=').next().unwrap_or(arg);
    flag == DISABLE_HA_FLAG || flag == &DISABLE_HA_FLAG[1..]
}

/// The podAntiAffinity value the policy wants, or None to leave it alone.
pub fn anti_affinity_value(aa: &PodAntiAffinity, match_labels: &Value) -> Option<Value> {
    let term = json!({
        "labelSelector": {"matchLabels": match_labels},
        "topologyKey": aa.topology_key(),
    });
    match aa.kind {
        AntiAffinityType::Required => {
            Some(json!({"requiredDuringSchedulingIgnoredDuringExecution": [term]}))
        }
        AntiAffinityType::Preferred => Some(json!({
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": term}
            ]
        })),
        AntiAffinityType::None => None,
    }
}

/// True when `current` already keeps this Deployment's replicas apart the
/// way the policy asks: the same single term (type, topologyKey, weight 100
/// for Preferred) whose `matchLabels` are a non-empty subset of the
/// Deployment's selector (so it matches every replica). Knative ships such
/// terms (`app: activator` where the selector also has `role: activator`);
/// leaving them alone avoids a pod template change and a rollout.
pub fn anti_affinity_satisfied(
    aa: &PodAntiAffinity,
    selector: &serde_json::Map<String, Value>,
    current: Option<&Value>,
) -> bool {
    let Some(Value::Object(current)) = current else {
        return false;
    };
    let (key, term) = match aa.kind {
        AntiAffinityType::Required => ("requiredDuringSchedulingIgnoredDuringExecution", None),
        AntiAffinityType::Preferred => {
            ("preferredDuringSchedulingIgnoredDuringExecution", Some(()))
        }
        AntiAffinityType::None => return true,
    };
    if current.len() != 1 {
        return false;
    }
    let Some(Value::Array(terms)) = current.get(key) else {
        return false;
    };
    let [item] = terms.as_slice() else {
        return false;
    };
    let pod_term = if term.is_some() {
        let Some(obj) = item.as_object() else {
            return false;
        };
        if obj.len() != 2 || obj.get("weight") != Some(&json!(100)) {
            return false;
        }
        match obj.get("podAffinityTerm") {
            Some(t) => t,
            None => return false,
        }
    } else {
        item
    };
    let Some(pod_term) = pod_term.as_object() else {
        return false;
    };
    if pod_term.len() != 2 || pod_term.get("topologyKey") != Some(&json!(aa.topology_key())) {
        return false;
    }
    let Some(Value::Object(label_selector)) = pod_term.get("labelSelector") else {
        return false;
    };
    if label_selector.len() != 1 {
        return false;
    }
    let Some(Value::Object(labels)) = label_selector.get("matchLabels") else {
        return false;
    };
    !labels.is_empty() && labels.iter().all(|(k, v)| selector.get(k) == Some(v))
}

/// Index of the Knative container: named like the Deployment, else
/// `controller` for net-*-controller, else the first.
fn knative_container(name: &str, containers: &[Value]) -> Option<usize> {
    let named = |n: &str| {
        containers
            .iter()
            .position(|c| c.get("name").and_then(Value::as_str) == Some(n))
    };
    named(name)
        .or_else(|| {
            (name.starts_with("net-") && name.ends_with("-controller"))
                .then(|| named("controller"))
                .flatten()
        })
        .or(if containers.is_empty() { None } else { Some(0) })
}

pub(crate) fn mutate(t: &Target<'_>) -> Result<Handled, EngineError> {
    let name = t.name;
    if t.is_excluded(name) {
        return Ok((None, Vec::new()));
    }
    let spec = &t.policy.spec;
    let disabled = t.ha_disabled();
    let mut changes = Vec::new();

    // What we want.
    let current_replicas = t.int_at(REPLICAS)?;
    let want_replicas = if t.is_hpa_backed(name) {
        None
    } else if disabled {
        Some(1)
    } else {
        t.wanted_replicas(name)
    };
    let aa = t
        .workload(name)
        .and_then(|w| w.pod_anti_affinity.as_ref())
        .or(spec.pod_anti_affinity.as_ref());
    let match_labels = t.object_at(MATCH_LABELS)?;
    for (k, v) in match_labels.into_iter().flatten() {
        if !v.is_string() {
            return Err(t.malformed(format!(
                "spec.selector.matchLabels.{k} must be a string, got {v}"
            )));
        }
    }
    let want_aa = match (aa, match_labels) {
        (Some(aa), Some(ml)) if !ml.is_empty() => {
            let current = super::lookup(t.object, ANTI_AFFINITY);
            if anti_affinity_satisfied(aa, ml, current) {
                None
            } else {
                anti_affinity_value(aa, &Value::Object(ml.clone())).map(|v| (aa, v))
            }
        }
        _ => None,
    };
    let spread = t
        .workload(name)
        .and_then(|w| w.topology_spread_constraints.as_ref())
        .or(spec.topology_spread_constraints.as_ref())
        .filter(|l| !l.is_empty());
    let want_spread = match (spread, match_labels) {
        (Some(list), Some(ml)) if !ml.is_empty() => {
            Some((list, spread_value(list, &Value::Object(ml.clone()))))
        }
        _ => None,
    };
    // Leader election flag: only on binaries that accept it, only when the
    // policy says something about leader election.
    let want_flag = match &spec.leader_election {
        Some(le) if DISABLE_HA_DEPLOYMENTS.contains(&name) => Some(!le.is_enabled()),
        _ => None,
    };

    let mut p: Option<Patcher> = None;
    if let Some(n) = want_replicas {
        let current = current_replicas.unwrap_or(1);
        if current != i64::from(n) {
            let pt = p.get_or_insert_with(|| Patcher::new(t.object));
            pt.set(REPLICAS, json!(n)).map_err(|e| t.malformed(e))?;
            let before = current_replicas.map_or("unset".to_string(), |c| c.to_string());
            changes.push(t.change(format!("spec.replicas {before} -> {n}")));
        }
    }

    if let Some((aa, value)) = want_aa {
        let current = super::lookup(t.object, ANTI_AFFINITY);
        if current != Some(&value) {
            super::check_parents(t, ANTI_AFFINITY)?;
            let pt = p.get_or_insert_with(|| Patcher::new(t.object));
            pt.set(ANTI_AFFINITY, value).map_err(|e| t.malformed(e))?;
            changes.push(t.change(format!(
                "pod anti-affinity set to {} on {}",
                aa.kind.as_str(),
                aa.topology_key()
            )));
        }
    }

    if let Some((list, value)) = want_spread
        && super::lookup(t.object, SPREAD) != Some(&value)
    {
        super::check_parents(t, SPREAD)?;
        let pt = p.get_or_insert_with(|| Patcher::new(t.object));
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
    }

    if let Some(disable) = want_flag {
        flag(t, &mut p, disable, &mut changes)?;
    }

    Ok((p, changes))
}

fn flag(
    t: &Target<'_>,
    p: &mut Option<Patcher>,
    disable: bool,
    changes: &mut Vec<String>,
) -> Result<(), EngineError> {
    let containers = match super::lookup(t.object, CONTAINERS) {
        None => return Ok(()),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(t.malformed(format!(
                "spec.template.spec.containers must be a list, got {}",
                crate::policy::schema_check::show(other)
            )));
        }
    };
    let Some(index) = knative_container(t.name, containers) else {
        return Ok(());
    };
    let container = &containers[index];
    let cname = container
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let args: Vec<&str> = match container.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|a| {
                a.as_str().ok_or_else(|| {
                    t.malformed(format!(
                        "spec.template.spec.containers[{index}].args must be strings, got {a}"
                    ))
                })
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(t.malformed(format!(
                "spec.template.spec.containers[{index}].args must be a list, got {}",
                crate::policy::schema_check::show(other)
            )));
        }
    };
    let idx = index.to_string();
    let container_path: [&str; 5] = ["spec", "template", "spec", "containers", &idx];
    let args_path: [&str; 6] = ["spec", "template", "spec", "containers", &idx, "args"];
    let present: Vec<usize> = args
        .iter()
        .enumerate()
        .filter(|(_, a)| is_disable_ha_arg(a))
        .map(|(i, _)| i)
        .collect();
    if disable {
        if !present.is_empty() {
            return Ok(());
        }
        if !container.is_object() {
            return Err(t.malformed(format!(
                "spec.template.spec.containers[{index}] must be an object"
            )));
        }
        let pt = p.get_or_insert_with(|| Patcher::new(t.object));
        if container.get("args").is_some_and(Value::is_array) {
            pt.push(&args_path, json!(DISABLE_HA_FLAG))
                .map_err(|e| t.malformed(e))?;
        } else {
            let mut path = container_path.to_vec();
            path.push("args");
            pt.set(&path, json!([DISABLE_HA_FLAG]))
                .map_err(|e| t.malformed(e))?;
        }
        changes.push(t.change(format!("container {cname} args + {DISABLE_HA_FLAG}")));
    } else if !present.is_empty() {
        let pt = p.get_or_insert_with(|| Patcher::new(t.object));
        for i in present.iter().rev() {
            pt.remove_index(&args_path, *i)
                .map_err(|e| t.malformed(e))?;
        }
        changes.push(t.change(format!("container {cname} args - {DISABLE_HA_FLAG}")));
    }
    Ok(())
}
