//! The one generator of random valid policies for the property tests
//! ([`arb_policy`]: `HighAvailabilityPolicy` documents read by
//! `Policy::from_json`). A [`Shape`] says what a test's policies draw from:
//! the namespaces, the replicas, and which field groups vary over which
//! values, globally and per workload. Each property test declares its shape
//! next to it. Depends on nothing else in `tests/it/support/`.

use std::ops::RangeInclusive;

use knative_ha_webhook::policy::Policy;
use proptest::prelude::*;
use serde_json::{Value, json};

pub const HOSTNAME: &str = "kubernetes.io/hostname";
pub const ZONE: &str = "topology.kubernetes.io/zone";

/// The Deployments of the Knative v1.23.0 fixtures in `knative-serving`.
pub const DEPLOYMENTS: &[&str] = &[
    "activator",
    "autoscaler",
    "controller",
    "webhook",
    "autoscaler-hpa",
    "net-kourier-controller",
];

/// What a test's random policies draw from. A group left `None` (or empty)
/// is never set; a group given is set or left out at random, globally and in
/// every workload override.
pub struct Shape {
    /// The namespaces a policy targets (one is drawn).
    pub namespaces: &'static [&'static str],
    /// `replicas` (1 when leader election is off).
    pub replicas: Option<RangeInclusive<i32>>,
    pub leader_election: Option<LeaderElection>,
    pub anti_affinity: Option<AntiAffinity>,
    pub spread: Option<Spread>,
    pub budgets: Option<Budgets>,
    /// `priorityClassName` values.
    pub priority_classes: &'static [&'static str],
    pub workloads: Workloads,
    /// Whether `governOperatorOwned` varies (true, false or unset).
    pub operator_owned: bool,
}

/// `leaderElection`: `enabled` true, false or unset, `buckets` (1 when off)
/// and one of `durations`.
pub struct LeaderElection {
    pub buckets: RangeInclusive<i32>,
    pub durations: &'static [Durations],
}

/// (leaseDuration, renewDeadline, retryPeriod), each valid with Knative's
/// defaults for the unset ones.
pub type Durations = (
    Option<&'static str>,
    Option<&'static str>,
    Option<&'static str>,
);

/// No leader-election durations.
pub const NO_DURATIONS: Durations = (None, None, None);

/// `podAntiAffinity`: type None, Preferred or Required, `topologyKey` one
/// of `keys` or unset.
pub struct AntiAffinity {
    pub keys: &'static [&'static str],
}

/// `topologySpreadConstraints`: one constraint per key of a non-empty
/// subsequence of `keys`, each with `maxSkew` (of `max_skew`),
/// `whenUnsatisfiable` and `nodeTaintsPolicy` set or unset.
pub struct Spread {
    pub keys: &'static [&'static str],
    pub max_skew: RangeInclusive<u32>,
}

/// `podDisruptionBudget`: `minAvailable` or `maxUnavailable`, an integer of
/// `ints` or a percentage of `percents`; in workload overrides too when
/// `per_workload`.
pub struct Budgets {
    pub ints: RangeInclusive<i32>,
    pub percents: Option<RangeInclusive<u32>>,
    pub per_workload: bool,
}

/// `workloads` (up to `most` overrides, for distinct `names`) and `exclude`
/// (up to `exclude` of `names`, those without an override).
pub struct Workloads {
    pub names: &'static [&'static str],
    pub most: usize,
    pub exclude: usize,
}

/// No workload overrides, nothing excluded.
pub const NO_WORKLOADS: Workloads = Workloads {
    names: &[],
    most: 0,
    exclude: 0,
};

/// Random valid policies of `shape`. A budget that allows no disruption
/// with the replicas the policy sets is refused: the policy is then taken
/// without its budgets.
pub fn arb_policy(shape: &'static Shape) -> impl Strategy<Value = Policy> {
    let w = &shape.workloads;
    let operator = match shape.operator_owned {
        true => prop::option::of(any::<bool>()).boxed(),
        false => Just(None).boxed(),
    };
    (
        prop::sample::select(shape.namespaces.to_vec()),
        arb_fields(shape, false),
        maybe(shape.leader_election.as_ref().map(arb_leader_election)),
        operator,
        (
            names(w.names, w.most),
            prop::collection::vec(arb_fields(shape, true), w.most),
        ),
        names(w.names, w.exclude),
    )
        .prop_map(
            |(namespace, global, le, operator, (names, fields), exclude)| {
                // Leader election off allows one replica only.
                let off = le["enabled"] == false;
                let cap = |mut fields: Value| {
                    if off && !fields["replicas"].is_null() {
                        fields["replicas"] = 1.into();
                    }
                    fields
                };
                let workloads: Vec<Value> = names
                    .iter()
                    .zip(fields)
                    .map(|(name, fields)| {
                        let mut fields = cap(fields);
                        fields["name"] = json!(name);
                        fields
                    })
                    .collect();
                let exclude: Vec<&str> =
                    exclude.into_iter().filter(|e| !names.contains(e)).collect();
                let mut spec = cap(global);
                spec["targetNamespace"] = json!(namespace);
                spec["leaderElection"] = le;
                spec["governOperatorOwned"] = json!(operator);
                spec["workloads"] = json!(workloads);
                spec["exclude"] = json!(exclude);
                valid_policy(spec)
            },
        )
}

/// Up to `most` distinct names of `names`, in their order.
fn names(names: &'static [&'static str], most: usize) -> BoxedStrategy<Vec<&'static str>> {
    let most = most.min(names.len());
    prop::sample::subsequence(names.to_vec(), 0..=most).boxed()
}

/// A value of `strategy` or null (left out); always null without one.
fn maybe(strategy: Option<BoxedStrategy<Value>>) -> BoxedStrategy<Value> {
    match strategy {
        Some(s) => prop::option::of(s)
            .prop_map(|v| v.unwrap_or(Value::Null))
            .boxed(),
        None => Just(Value::Null).boxed(),
    }
}

/// The fields of `shape` a policy sets globally and a workload override
/// sets for its Deployment (null: left out).
fn arb_fields(shape: &'static Shape, workload: bool) -> impl Strategy<Value = Value> {
    let replicas = shape
        .replicas
        .clone()
        .map(|r| r.prop_map(Value::from).boxed());
    let budgets = shape
        .budgets
        .as_ref()
        .filter(|b| !workload || b.per_workload);
    let priority = (!shape.priority_classes.is_empty()).then(|| {
        prop::sample::select(shape.priority_classes.to_vec())
            .prop_map(Value::from)
            .boxed()
    });
    (
        maybe(replicas),
        maybe(shape.anti_affinity.as_ref().map(arb_anti_affinity)),
        maybe(shape.spread.as_ref().map(arb_spread)),
        maybe(budgets.map(arb_budget)),
        maybe(priority),
    )
        .prop_map(|(replicas, aa, spread, pdb, priority)| {
            json!({"replicas": replicas, "podAntiAffinity": aa,
                   "topologySpreadConstraints": spread, "podDisruptionBudget": pdb,
                   "priorityClassName": priority})
        })
}

/// The policy of `spec` (its nulls left out), without its budgets if they
/// are refused.
fn valid_policy(spec: Value) -> Policy {
    let mut policy = json!({
        "apiVersion": "knativeha.dev/v1alpha1", "kind": "HighAvailabilityPolicy",
        "metadata": {"name": "random"}, "spec": spec,
    });
    strip_nulls(&mut policy);
    Policy::from_json(&policy).unwrap_or_else(|_| {
        if let Some(spec) = policy["spec"].as_object_mut() {
            spec.remove("podDisruptionBudget");
        }
        for w in policy["spec"]["workloads"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            if let Some(w) = w.as_object_mut() {
                w.remove("podDisruptionBudget");
            }
        }
        Policy::from_json(&policy)
            .unwrap_or_else(|e| panic!("the generator made an invalid policy: {e}\n{policy}"))
    })
}

fn arb_leader_election(shape: &LeaderElection) -> BoxedStrategy<Value> {
    (
        prop::option::of(any::<bool>()),
        prop::option::of(shape.buckets.clone()),
        prop::sample::select(shape.durations.to_vec()),
    )
        .prop_map(|(enabled, buckets, (lease, renew, retry))| {
            let buckets = buckets.map(|b| if enabled == Some(false) { 1 } else { b });
            json!({"enabled": enabled, "buckets": buckets, "leaseDuration": lease,
                   "renewDeadline": renew, "retryPeriod": retry})
        })
        .boxed()
}

fn arb_anti_affinity(shape: &AntiAffinity) -> BoxedStrategy<Value> {
    (
        prop::sample::select(vec!["None", "Preferred", "Required"]),
        prop::option::of(prop::sample::select(shape.keys.to_vec())),
    )
        .prop_map(|(kind, key)| json!({"type": kind, "topologyKey": key}))
        .boxed()
}

fn arb_spread(shape: &Spread) -> BoxedStrategy<Value> {
    let constraint = (
        prop::option::of(shape.max_skew.clone()),
        prop::option::of(prop::sample::select(vec![
            "DoNotSchedule",
            "ScheduleAnyway",
        ])),
        prop::option::of(prop::sample::select(vec!["Honor", "Ignore"])),
    );
    let n = shape.keys.len();
    (
        prop::sample::subsequence(shape.keys.to_vec(), 1..=n),
        prop::collection::vec(constraint, n),
    )
        .prop_map(|(keys, fields)| {
            keys.iter()
                .zip(fields)
                .map(|(key, (skew, when, taints))| {
                    json!({"topologyKey": key, "maxSkew": skew,
                           "whenUnsatisfiable": when, "nodeTaintsPolicy": taints})
                })
                .collect()
        })
        .boxed()
}

fn arb_budget(shape: &Budgets) -> BoxedStrategy<Value> {
    let ints = shape.ints.clone().prop_map(Value::from);
    let value = match shape.percents.clone() {
        Some(p) => prop_oneof![ints, p.prop_map(|n| Value::from(format!("{n}%")))].boxed(),
        None => ints.boxed(),
    };
    (any::<bool>(), value)
        .prop_map(|(min, v)| match min {
            true => json!({"minAvailable": v}),
            false => json!({"maxUnavailable": v}),
        })
        .boxed()
}

/// `value` without its null members (a policy field left out).
fn strip_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(strip_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}
