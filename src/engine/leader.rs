//! Leader election on Deployments: `--disable-ha` and the pod-template
//! annotation that rolls the leader-elected Deployments together when the
//! policy's leader election settings change.
//!
//! Invariant: after a mutation a Deployment carries `--disable-ha` only if it
//! runs exactly one replica and no HPA scales it; otherwise the flag is
//! removed, whatever the policy says (several replicas without a leader
//! all reconcile every key).

use serde_json::{Value, json};

use super::change::{Change, FieldChange, What};
use super::patch::Patcher;
use super::records::{self, ORIGINAL_DISABLE_HA, ROLLOUT_MAX_SURGE};
use super::{DISABLE_HA_FLAG, EngineError, Fault, Target};
use crate::knative;
use crate::policy::LeaderElection;
use crate::policy::duration::parse_go_duration;
use crate::policy::schema_check::show;

/// Pod-template annotation holding [`settings_hash`].
pub const HASH_ANNOTATION: &str = "knativeha.dev/leader-election-hash";

/// The pod template's containers; of each, its [`NAME`] and [`ARGS`].
pub(crate) const CONTAINERS: &[&str] = &["spec", "template", "spec", "containers"];
const NAME: &str = "name";
pub(crate) const ARGS: &str = "args";
pub(crate) const HASH_PATH: &[&str] = &[
    "spec",
    "template",
    "metadata",
    "annotations",
    HASH_ANNOTATION,
];

/// The hash annotation as change lines name the field.
pub(crate) fn hash_field() -> String {
    format!("pod template annotation {HASH_ANNOTATION}")
}

/// A hash of the effective leader election settings (buckets and the three
/// durations, normalised so `1m` and `60s` agree): FNV-1a 64 (stable across
/// builds and Rust versions, unlike `DefaultHasher`) of
/// `enabled=..;buckets=..;lease=..;renew=..;retry=..` as 16 hex digits.
pub fn settings_hash(le: &LeaderElection) -> String {
    settings_hash_of(le, false)
}

/// [`settings_hash`]; with `held_back`, as if the policy set no duration
/// (`config-leader-election` gets none of them).
fn settings_hash_of(le: &LeaderElection, held_back: bool) -> String {
    let duration = |d: &Option<String>| match d.as_deref().filter(|_| !held_back) {
        Some(v) => parse_go_duration(v).map_or(v.to_string(), |ns| ns.to_string()),
        None => "default".to_string(),
    };
    let buckets = if le.is_enabled() { le.buckets } else { Some(1) };
    let text = format!(
        "enabled={};buckets={};lease={};renew={};retry={}",
        le.is_enabled(),
        buckets.map_or("default".to_string(), |b| b.to_string()),
        duration(&le.lease_duration),
        duration(&le.renew_deadline),
        duration(&le.retry_period)
    );
    let hash = text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{hash:016x}")
}

/// Removes the settings hash from the pod template in `p` (a copy of
/// `object`, made on first use): the field's change, None without a hash.
pub(crate) fn remove_hash(object: &Value, p: &mut Option<Patcher>) -> Option<FieldChange> {
    let hash = super::lookup(object, HASH_PATH)?;
    p.get_or_insert_with(|| Patcher::new(object))
        .remove_pruned(HASH_PATH);
    Some(FieldChange::removed(hash_field(), show(hash)).in_pod_template())
}

/// Sets the hash annotation on governed leader-elected Deployments when the
/// policy has leader election settings: of what `config-leader-election`
/// gets, so without the durations when the namespace's ConfigMap (if known)
/// holds them back.
pub(crate) fn hash(
    t: &Target<'_>,
    replicas: i64,
    p: &mut Option<Patcher>,
    changes: &mut Vec<Change>,
) -> Result<(), EngineError> {
    let written = settings_annotation(t, p, changes)?;
    // One pod surges at once whatever maxSurge says.
    let several = replicas > 1 || t.is_hpa_backed(t.name);
    all_at_once(t, written && several, p, changes)
}

/// The hash annotation; whether the Deployment carries it after the
/// mutation.
fn settings_annotation(
    t: &Target<'_>,
    p: &mut Option<Patcher>,
    changes: &mut Vec<Change>,
) -> Result<bool, EngineError> {
    let le = t.policy.spec.leader_election.as_ref();
    let Some(le) = le.filter(|_| knative::is_leader_elected(t.name)) else {
        return Ok(false);
    };
    if let Some(why) = t
        .facts
        .leader_election
        .and_then(|data| super::configmap::left_unchanged(t, data))
    {
        // Knative reads none of the policy's settings: no hash claims them.
        if let Some(field) = remove_hash(t.object, p) {
            changes.push(t.change(What::Fields(vec![field])).noted(format!(
                "{why}: the leader-election settings are not written there"
            )));
        }
        return Ok(false);
    }
    let held_back = t
        .facts
        .leader_election
        .is_some_and(|data| super::configmap::durations_held_back(t, le, data));
    let want = settings_hash_of(le, held_back);
    let current = super::lookup(t.object, HASH_PATH).and_then(Value::as_str);
    if current == Some(&want) {
        return Ok(true);
    }
    super::check_parents(t, HASH_PATH)?;
    let pt = p.get_or_insert_with(|| Patcher::new(t.object));
    pt.set(HASH_PATH, json!(want)).map_err(|e| t.malformed(e))?;
    let field = FieldChange::new(hash_field(), current.unwrap_or("unset"), want).in_pod_template();
    changes.push(t.change(What::Fields(vec![field])).noted(
        "hash of the leader-election settings: when they change, the leader-elected Deployments restart together",
    ));
    Ok(true)
}

const MAX_SURGE: &[&str] = ROLLOUT_MAX_SURGE.path;
const EVERY_POD: &str = "100%";

/// While a leader-elected Deployment rolls onto new leader-election
/// settings, its old pods and its new ones each lead every key under their
/// own bucket shape (the Lease names carry the bucket count). With
/// `maxSurge: 100%` (as Knative ships net-kourier-controller) every new pod
/// starts at once, so that window lasts one pod start, not one per replica.
/// Recorded; the release's value comes back where the hash goes or one
/// replica runs.
fn all_at_once(
    t: &Target<'_>,
    wanted: bool,
    p: &mut Option<Patcher>,
    changes: &mut Vec<Change>,
) -> Result<(), EngineError> {
    if !wanted || !t.rolls_updates()? {
        return records::undo(t, p, &ROLLOUT_MAX_SURGE, changes);
    }
    let current = super::lookup(t.object, MAX_SURGE).filter(|v| !v.is_null());
    if current.and_then(Value::as_str) == Some(EVERY_POD) {
        return Ok(());
    }
    records::write(t, p, &ROLLOUT_MAX_SURGE, json!(EVERY_POD))?;
    let field = What::field(
        MAX_SURGE.join("."),
        records::show_rolling(current),
        EVERY_POD,
    );
    changes.push(t.change(field).noted(
        "leader-elected: on a restart every new pod starts at once, so old and new settings lead side by side for one pod start",
    ));
    Ok(())
}

/// Whether the flag should be added (`Some(true)`), removed (`Some(false)`)
/// or left as it is (`None`). `replicas` is the count after the mutation.
pub(crate) fn want_flag(t: &Target<'_>, replicas: i64) -> Option<bool> {
    if replicas != 1 || t.is_hpa_backed(t.name) {
        return Some(false);
    }
    let le = t.policy.spec.leader_election.as_ref()?;
    if knative::accepts_disable_ha(t.name) {
        Some(!le.is_enabled())
    } else {
        le.is_enabled().then_some(false)
    }
}

/// True when any container of the Deployment's pod template has
/// `--disable-ha` among its args.
pub fn carries_disable_ha(object: &Value) -> bool {
    let carries = |c: &Value| {
        c.get(ARGS)
            .and_then(Value::as_array)
            .is_some_and(|a| a.iter().any(|a| a.as_str().is_some_and(is_disable_ha_arg)))
    };
    super::lookup(object, CONTAINERS)
        .and_then(Value::as_array)
        .is_some_and(|cs| cs.iter().any(carries))
}

pub(crate) fn is_disable_ha_arg(arg: &str) -> bool {
    let flag = arg.split('=').next().unwrap_or(arg);
    flag == DISABLE_HA_FLAG || flag == &DISABLE_HA_FLAG[1..]
}

/// Index of the Knative container: named like the Deployment, else
/// `controller` for net-*-controller, else the first.
pub(crate) fn knative_container(name: &str, containers: &[Value]) -> Option<usize> {
    let named = |n: &str| {
        containers
            .iter()
            .position(|c| c.get(NAME).and_then(Value::as_str) == Some(n))
    };
    named(name)
        .or_else(|| {
            (name.starts_with("net-") && name.ends_with("-controller"))
                .then(|| named("controller"))
                .flatten()
        })
        .or((!containers.is_empty()).then_some(0))
}

/// The container's args; an error unless they are absent, null or a list
/// of strings.
fn args_of<'v>(
    t: &Target<'_>,
    index: usize,
    container: &'v Value,
) -> Result<Vec<&'v str>, EngineError> {
    let path = || format!("spec.template.spec.containers[{index}].args");
    match container.get(ARGS) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|a| {
                a.as_str().ok_or_else(|| {
                    t.malformed(Fault::Mistyped {
                        path: path(),
                        want: "strings",
                        got: a.to_string(),
                    })
                })
            })
            .collect(),
        Some(other) => Err(t.malformed(Fault::mistyped(path(), "a list", other))),
    }
}

/// Adds `--disable-ha` to the args of container `index` (`container`) in `p`.
pub(crate) fn add_flag(p: &mut Patcher, index: usize, container: &Value) -> Result<(), Fault> {
    let idx = index.to_string();
    let args = ["spec", "template", "spec", "containers", &idx, ARGS];
    if container.get(ARGS).is_some_and(Value::is_array) {
        p.push(&args, json!(DISABLE_HA_FLAG))?;
    } else {
        p.set(&args, json!([DISABLE_HA_FLAG]))?;
    }
    Ok(())
}

/// Adds (`disable`) or removes `--disable-ha` on the Knative container.
pub(crate) fn flag(
    t: &Target<'_>,
    p: &mut Option<Patcher>,
    disable: bool,
    changes: &mut Vec<Change>,
) -> Result<(), EngineError> {
    let containers = match super::lookup(t.object, CONTAINERS) {
        None => return Ok(()),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(t.malformed(Fault::mistyped(
                "spec.template.spec.containers",
                "a list",
                other,
            )));
        }
    };
    let Some(index) = knative_container(t.name, containers) else {
        return Ok(());
    };
    let container = &containers[index];
    let cname = container.get(NAME).and_then(Value::as_str).unwrap_or("");
    let args = args_of(t, index, container)?;
    let idx = index.to_string();
    let args_path: [&str; 6] = ["spec", "template", "spec", "containers", &idx, ARGS];
    let present: Vec<usize> = (0..args.len())
        .filter(|i| is_disable_ha_arg(args[*i]))
        .collect();
    match (disable, present.is_empty()) {
        (true, true) if !container.is_object() => {
            return Err(t.malformed(Fault::Misshapen {
                path: format!("spec.template.spec.containers[{index}]"),
                want: "an object",
            }));
        }
        (true, true) => {
            let pt = flag_patcher(t, p)?;
            add_flag(pt, index, container).map_err(|e| t.malformed(e))?;
        }
        // Only the flag was there: no `args: []` left behind (the same to
        // Kubernetes, a diff to the release's manifest).
        (false, false) if present.len() == args.len() => {
            flag_patcher(t, p)?.remove(&args_path);
        }
        (false, false) => {
            let pt = flag_patcher(t, p)?;
            for i in present.iter().rev() {
                pt.remove_index(&args_path, *i)
                    .map_err(|e| t.malformed(e))?;
            }
        }
        _ => return Ok(()),
    }
    changes.push(t.change(What::ContainerArg {
        container: Some(cname.to_string()),
        arg: DISABLE_HA_FLAG,
        added: disable,
    }));
    Ok(())
}

/// [`records::patcher`] for a change of `--disable-ha`: records whether the flag
/// was there.
pub(crate) fn flag_patcher<'p>(
    t: &Target<'_>,
    p: &'p mut Option<Patcher>,
) -> Result<&'p mut Patcher, EngineError> {
    let pt = p.get_or_insert_with(|| Patcher::new(t.object));
    if records::annotation(t.object, ORIGINAL_DISABLE_HA).is_none() {
        let had = carries_disable_ha(t.object);
        records::annotate(t, pt, ORIGINAL_DISABLE_HA, had.to_string())?;
    }
    Ok(pt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settings_hash_is_the_documented_one() {
        // README: the hash of examples/policy.yaml's leader election.
        let policy =
            crate::policy::Policy::from_yaml(include_str!("../../examples/policy.yaml")).unwrap();
        let le = policy.spec.leader_election.as_ref().unwrap();
        assert_eq!(settings_hash(le), "a94b58b82d50d865");
        // The text it hashes, spelled out (FNV-1a 64 of it).
        let text = "enabled=true;buckets=5;lease=60000000000;renew=40000000000;retry=10000000000";
        let fnv = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        assert_eq!(settings_hash(le), format!("{fnv:016x}"));
    }
}
