//! Random valid policies (`HighAvailabilityPolicy` text read by
//! `Policy::from_yaml`) over every field the engine reads, globally and per
//! workload, naming the Deployments of the Knative v1.23.0 fixtures. Depends
//! on nothing else in `tests/it/support/`.

use knative_ha_webhook::policy::Policy;
use proptest::prelude::*;
use serde_json::{Value, json};

/// Deployments of the fixtures a policy names in `workloads` and `exclude`.
const WORKLOADS: &[&str] = &[
    "activator",
    "autoscaler",
    "controller",
    "webhook",
    "autoscaler-hpa",
    "net-kourier-controller",
];

/// Random valid policies for `namespace`, each field set or left out.
pub fn arb_policy(namespace: &'static str) -> impl Strategy<Value = Policy> {
    let workloads = (
        prop::sample::subsequence(WORKLOADS.to_vec(), 0..3),
        prop::collection::vec(
            (
                prop::option::of(1..=5i32),
                arb_aa(),
                arb_spread(),
                arb_pdb(),
            ),
            3,
        ),
    );
    (
        (
            prop::option::of(1..=5i32),
            arb_leader_election(),
            prop::option::of(any::<bool>()),
        ),
        (arb_aa(), arb_spread(), arb_pdb()),
        workloads,
        prop::sample::subsequence(WORKLOADS.to_vec(), 0..2),
    )
        .prop_map(
            move |((replicas, le, operator), global, (names, fields), exclude)| {
                // Leader election off allows one replica and one bucket only.
                let off = le.as_ref().is_some_and(|le| le["enabled"] == false);
                let cap = |r: Option<i32>| if off { r.map(|_| 1) } else { r };
                let le = le.map(|mut le| {
                    if off && !le["buckets"].is_null() {
                        le["buckets"] = 1.into();
                    }
                    le
                });
                let workloads: Vec<Value> = names
                    .iter()
                    .zip(fields)
                    .map(|(name, (replicas, aa, spread, pdb))| {
                        json!({"name": name, "replicas": cap(replicas), "podAntiAffinity": aa,
                           "topologySpreadConstraints": spread, "podDisruptionBudget": pdb})
                    })
                    .collect();
                let exclude: Vec<&str> =
                    exclude.into_iter().filter(|e| !names.contains(e)).collect();
                let (aa, spread, pdb) = global;
                let spec = json!({
                    "targetNamespace": namespace, "replicas": cap(replicas), "leaderElection": le,
                    "podAntiAffinity": aa, "topologySpreadConstraints": spread,
                    "podDisruptionBudget": pdb, "workloads": workloads, "exclude": exclude,
                    "governOperatorOwned": operator,
                });
                valid_policy(spec)
            },
        )
}

/// The policy of `spec` (its nulls left out). A budget that allows no
/// disruption with the replicas the policy sets is refused: the policy is
/// then taken without its budgets.
fn valid_policy(spec: Value) -> Policy {
    let mut policy = json!({
        "apiVersion": "knativeha.dev/v1alpha1", "kind": "HighAvailabilityPolicy",
        "metadata": {"name": "random"}, "spec": spec,
    });
    strip_nulls(&mut policy);
    Policy::from_yaml(&policy.to_string()).unwrap_or_else(|_| {
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
        Policy::from_yaml(&policy.to_string())
            .unwrap_or_else(|e| panic!("the generator made an invalid policy: {e}\n{policy}"))
    })
}

fn arb_leader_election() -> impl Strategy<Value = Option<Value>> {
    // (leaseDuration, renewDeadline, retryPeriod): each valid with
    // Knative's defaults for the unset ones.
    let durations = prop::sample::select(vec![
        (None, None, None),
        (Some("15s"), Some("10s"), Some("2s")),
        (None, Some("20s"), None),
        (Some("1m30s"), None, None),
        (None, None, Some("5s")),
    ]);
    let le = (
        prop::option::of(any::<bool>()),
        prop::option::of(1..=10i32),
        durations,
    );
    prop::option::of(le).prop_map(|le| {
        le.map(|(enabled, buckets, (lease, renew, retry))| {
            json!({"enabled": enabled, "buckets": buckets, "leaseDuration": lease,
                   "renewDeadline": renew, "retryPeriod": retry})
        })
    })
}

fn arb_aa() -> impl Strategy<Value = Option<Value>> {
    let key = prop::option::of(prop::sample::select(vec![
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    ]));
    prop::option::of((
        prop::sample::select(vec!["None", "Preferred", "Required"]),
        key,
    ))
    .prop_map(|aa| aa.map(|(t, key)| json!({"type": t, "topologyKey": key})))
}

fn arb_spread() -> impl Strategy<Value = Option<Value>> {
    prop::option::of((1..=3u32, any::<bool>())).prop_map(|s| {
        s.map(|(skew, hard)| {
            let when = if hard {
                "DoNotSchedule"
            } else {
                "ScheduleAnyway"
            };
            json!([{"topologyKey": "topology.kubernetes.io/zone", "maxSkew": skew,
                    "whenUnsatisfiable": when}])
        })
    })
}

fn arb_pdb() -> impl Strategy<Value = Option<Value>> {
    let value = prop_oneof![(1..=2i32).prop_map(Value::from), Just(json!("50%"))];
    prop::option::of((any::<bool>(), value)).prop_map(|p| {
        p.map(|(min, v)| {
            let key = if min {
                "minAvailable"
            } else {
                "maxUnavailable"
            };
            json!({ key: v })
        })
    })
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
