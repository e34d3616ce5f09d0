//! Leader election on Deployments: `--disable-ha` and the pod-template
//! annotation that rolls the leader-elected Deployments together when the
//! policy's leader election settings change.
//!
//! Invariant: after a mutation a Deployment carries `--disable-ha` only if it
//! runs exactly one replica and no HPA scales it; otherwise the flag is
//! removed, whatever the policy says (several replicas without a leader
//! all reconcile every key).

use serde_json::{Value, json};

use super::patch::Patcher;
use super::{
    DISABLE_HA_DEPLOYMENTS, DISABLE_HA_FLAG, EngineError, LEADER_ELECTED_DEPLOYMENTS, Target,
};
use crate::policy::LeaderElection;
use crate::policy::duration::parse_go_duration;

/// Pod-template annotation holding [`settings_hash`].
pub const HASH_ANNOTATION: &str = "knativeha.dev/leader-election-hash";

const CONTAINERS: &[&str] = &["spec", "template", "spec", "containers"];
const HASH_PATH: &[&str] = &[
    "spec",
    "template",
    "metadata",
    "annotations",
    HASH_ANNOTATION,
];

/// FNV-1a 64 (stable across builds and Rust versions, unlike `DefaultHasher`).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A hash of the effective leader election settings (buckets and the three
/// durations, normalised so `1m` and `60s` agree).
pub fn settings_hash(le: &LeaderElection) -> String {
    let buckets = if le.is_enabled() { le.buckets } else { Some(1) };
    let d = |v: &Option<String>| match v.as_deref().map(parse_go_duration) {
        Some(Ok(ns)) => ns.to_string(),
        Some(Err(_)) => v.clone().unwrap_or_default(),
        None => "default".to_string(),
    };
    let text = format!(
        "enabled={};buckets={};lease={};renew={};retry={}",
        le.is_enabled(),
        buckets.map_or("default".to_string(), |b| b.to_string()),
        d(&le.lease_duration),
        d(&le.renew_deadline),
        d(&le.retry_period)
    );
    format!("{:016x}", fnv1a(text.as_bytes()))
}

/// Sets the hash annotation on governed leader-elected Deployments when the
/// policy has leader election settings.
pub(crate) fn hash(
    t: &Target<'_>,
    p: &mut Option<Patcher>,
    changes: &mut Vec<String>,
) -> Result<(), EngineError> {
    let Some(le) = &t.policy.spec.leader_election else {
        return Ok(());
    };
    if !LEADER_ELECTED_DEPLOYMENTS.contains(&t.name) {
        return Ok(());
    }
    let want = settings_hash(le);
    let current = super::lookup(t.object, HASH_PATH);
    if current.and_then(Value::as_str) == Some(want.as_str()) {
        return Ok(());
    }
    super::check_parents(t, HASH_PATH)?;
    let pt = p.get_or_insert_with(|| Patcher::new(t.object));
    pt.set(HASH_PATH, json!(want)).map_err(|e| t.malformed(e))?;
    changes.push(t.change(format!(
        "pod template annotation {HASH_ANNOTATION} {} -> {want} (hash of the leader-election settings: when they change, the leader-elected Deployments restart together)",
        current.and_then(Value::as_str).unwrap_or("unset")
    )));
    Ok(())
}

/// Whether the flag should be added (`Some(true)`), removed (`Some(false)`)
/// or left as it is (`None`). `replicas` is the count after the mutation.
pub(crate) fn want_flag(t: &Target<'_>, replicas: i64) -> Option<bool> {
    if replicas != 1 || t.is_hpa_backed(t.name) {
        return Some(false);
    }
    let le = t.policy.spec.leader_election.as_ref()?;
    if DISABLE_HA_DEPLOYMENTS.contains(&t.name) {
        Some(!le.is_enabled())
    } else {
        le.is_enabled().then_some(false)
    }
}

/// True when any container of the Deployment's pod template has
/// `--disable-ha` among its args.
pub fn carries_disable_ha(object: &Value) -> bool {
    super::lookup(object, CONTAINERS)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("args")?.as_array())
        .flatten()
        .any(|a| a.as_str().is_some_and(is_disable_ha_arg))
}

fn is_disable_ha_arg(arg: &str) -> bool {
    let flag = arg.split('=').next().unwrap_or(arg);
    flag == DISABLE_HA_FLAG || flag == &DISABLE_HA_FLAG[1..]
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

fn args_of<'v>(
    t: &Target<'_>,
    index: usize,
    container: &'v Value,
) -> Result<Vec<&'v str>, EngineError> {
    match container.get("args") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|a| {
                a.as_str().ok_or_else(|| {
                    t.malformed(format!(
                        "spec.template.spec.containers[{index}].args must be strings, got {a}"
                    ))
                })
            })
            .collect(),
        Some(other) => Err(t.malformed(format!(
            "spec.template.spec.containers[{index}].args must be a list, got {}",
            crate::policy::schema_check::show(other)
        ))),
    }
}

/// Adds (`disable`) or removes `--disable-ha` on the Knative container.
pub(crate) fn flag(
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
    let cname = container.get("name").and_then(Value::as_str).unwrap_or("");
    let args = args_of(t, index, container)?;
    let idx = index.to_string();
    let container_path: [&str; 5] = ["spec", "template", "spec", "containers", &idx];
    let args_path: [&str; 6] = ["spec", "template", "spec", "containers", &idx, "args"];
    let present: Vec<usize> = (0..args.len())
        .filter(|i| is_disable_ha_arg(args[*i]))
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
