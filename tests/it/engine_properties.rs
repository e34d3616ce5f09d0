//! Properties of the engine over random valid policies and random (and real
//! Knative) objects: the patch applied by an independent RFC 6902 applier
//! equals the engine's mutated object; mutating the result again yields an
//! empty patch; objects outside the target namespace never get a patch;
//! same input, same output.

use crate::support;

use std::collections::BTreeSet;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use knative_ha_webhook::engine::{self, Context, Input, Operation};
use knative_ha_webhook::policy::{
    AntiAffinityType, HighAvailabilityPolicy, HighAvailabilityPolicySpec, LeaderElection,
    NodeTaintsPolicy, PodAntiAffinity, PodDisruptionBudgetPolicy, Policy, TopologySpread,
    WhenUnsatisfiable, WorkloadOverride,
};
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use support::apply_rfc6902;

const NAMESPACES: &[&str] = &["knative-serving", "kourier-system"];
const NAMES: &[&str] = &[
    "activator",
    "autoscaler",
    "controller",
    "webhook",
    "autoscaler-hpa",
    "net-kourier-controller",
    "net-istio-webhook",
    "3scale-kourier-gateway",
    "custom",
];

fn arb_aa() -> impl Strategy<Value = PodAntiAffinity> {
    (
        prop::sample::select(vec![
            AntiAffinityType::Preferred,
            AntiAffinityType::Required,
            AntiAffinityType::None,
        ]),
        prop::option::of(prop::sample::select(vec![
            "kubernetes.io/hostname".to_string(),
            "topology.kubernetes.io/zone".to_string(),
        ])),
    )
        .prop_map(|(kind, topology_key)| PodAntiAffinity { kind, topology_key })
}

fn arb_spread() -> impl Strategy<Value = Option<Vec<TopologySpread>>> {
    prop::option::of(prop::sample::select(vec![
        vec![TopologySpread {
            topology_key: "topology.kubernetes.io/zone".into(),
            max_skew: None,
            when_unsatisfiable: None,
            node_taints_policy: None,
        }],
        vec![
            TopologySpread {
                topology_key: "topology.kubernetes.io/zone".into(),
                max_skew: Some(2),
                when_unsatisfiable: Some(WhenUnsatisfiable::DoNotSchedule),
                node_taints_policy: Some(NodeTaintsPolicy::Ignore),
            },
            TopologySpread {
                topology_key: "kubernetes.io/hostname".into(),
                max_skew: Some(1),
                when_unsatisfiable: Some(WhenUnsatisfiable::ScheduleAnyway),
                node_taints_policy: Some(NodeTaintsPolicy::Honor),
            },
        ],
    ]))
}

fn arb_priority_class() -> impl Strategy<Value = Option<String>> {
    prop::option::of(prop::sample::select(vec![
        "knative-control-plane".to_string(),
        "system-cluster-critical".to_string(),
    ]))
}

fn arb_int_or_percent() -> impl Strategy<Value = IntOrString> {
    prop_oneof![
        (0..5i32).prop_map(IntOrString::Int),
        (0..=100u32).prop_map(|n| IntOrString::String(format!("{n}%"))),
    ]
}

fn arb_leader_election() -> impl Strategy<Value = LeaderElection> {
    let durations = prop::sample::select(vec![
        (None, None, None),
        (Some("60s"), Some("40s"), Some("10s")),
        (Some("15s"), Some("10s"), Some("2s")),
        (Some("2m"), None, None),
        (None, None, Some("500ms")),
        (Some("1m30s"), Some("1m"), Some("1.5s")),
    ]);
    (
        prop::option::of(any::<bool>()),
        prop::option::of(1..=10i32),
        durations,
    )
        .prop_map(|(enabled, buckets, (l, r, p))| LeaderElection {
            enabled,
            buckets: if enabled == Some(false) {
                buckets.map(|_| 1)
            } else {
                buckets
            },
            lease_duration: l.map(String::from),
            renew_deadline: r.map(String::from),
            retry_period: p.map(String::from),
        })
}

/// Random valid policies (checked by `Policy::from_resource`).
fn arb_policy() -> impl Strategy<Value = Policy> {
    (
        prop::sample::select(NAMESPACES.to_vec()),
        prop::option::of(1..=7i32),
        prop::option::of(arb_leader_election()),
        prop::option::of(arb_aa()),
        prop::option::of(prop_oneof![
            arb_int_or_percent().prop_map(|v| PodDisruptionBudgetPolicy {
                min_available: Some(v),
                max_unavailable: None
            }),
            arb_int_or_percent().prop_map(|v| PodDisruptionBudgetPolicy {
                min_available: None,
                max_unavailable: Some(v)
            }),
        ]),
        prop::sample::subsequence(NAMES.to_vec(), 0..4),
        prop::collection::vec(
            (
                prop::option::of(1..=9i32),
                prop::option::of(arb_aa()),
                arb_spread(),
                arb_priority_class(),
            ),
            4,
        ),
        prop::sample::subsequence(NAMES.to_vec(), 0..3),
        arb_spread(),
        arb_priority_class(),
    )
        .prop_map(
            |(ns, replicas, le, aa, pdb, wl_names, wl_fields, exclude, spread, priority)| {
                let disabled = le.as_ref().is_some_and(|l| l.enabled == Some(false));
                let cap = |r: Option<i32>| if disabled { r.map(|_| 1) } else { r };
                let workloads: Vec<WorkloadOverride> = wl_names
                    .iter()
                    .zip(wl_fields)
                    .map(|(n, (r, a, t, pc))| WorkloadOverride {
                        name: n.to_string(),
                        replicas: cap(r),
                        pod_anti_affinity: a,
                        topology_spread_constraints: t,
                        pod_disruption_budget: None,
                        priority_class_name: pc,
                    })
                    .collect();
                let exclude: Vec<String> = exclude
                    .into_iter()
                    .filter(|e| !wl_names.contains(e))
                    .map(String::from)
                    .collect();
                let mut res = HighAvailabilityPolicy::new(
                    "p",
                    HighAvailabilityPolicySpec {
                        target_namespace: ns.to_string(),
                        replicas: cap(replicas),
                        leader_election: le,
                        pod_anti_affinity: aa,
                        topology_spread_constraints: spread,
                        pod_disruption_budget: pdb,
                        workloads,
                        exclude,
                        govern_operator_owned: None,
                        priority_class_name: priority,
                    },
                );
                res.metadata.name = Some("p".into());
                // A budget that allows no disruption with the replicas the
                // policy sets is rejected (it would block every drain): drop
                // it then.
                Policy::from_resource(&res)
                    .or_else(|_| {
                        res.spec.pod_disruption_budget = None;
                        Policy::from_resource(&res)
                    })
                    .expect("generated policy is valid")
            },
        )
}

fn obj(m: Vec<(&str, Value)>) -> Value {
    Value::Object(
        m.into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect::<Map<_, _>>(),
    )
}

fn metadata(name: &str, ns: Option<&str>) -> Value {
    match ns {
        Some(ns) => json!({"name": name, "namespace": ns}),
        None => json!({"name": name}),
    }
}

fn arb_existing_anti_affinity() -> impl Strategy<Value = Option<Value>> {
    prop::option::of(prop::sample::select(vec![
        json!({"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}}]}),
        json!({"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}]}),
        json!({"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}}]}),
        json!({}),
        Value::Null,
    ]))
}

fn arb_deployment() -> impl Strategy<Value = (Value, Option<&'static str>)> {
    (
        prop::sample::select(NAMES.to_vec()),
        prop::option::of(prop::sample::select(NAMESPACES.to_vec())),
        prop::option::of(prop_oneof![4 => 0..6i64, 1 => arb_extreme()]),
        prop::option::of(prop::sample::select(vec![json!({"app": "x"}), json!({"app": "x", "role": "x"}), json!({})])),
        arb_existing_anti_affinity(),
        any::<bool>(),
        prop::collection::vec(
            (
                prop::sample::select(vec!["same", "controller", "sidecar"]),
                prop::option::of(prop::collection::vec(prop::sample::select(vec!["--disable-ha", "-v", "--disable-ha=true", "--x"]), 0..3)),
            ),
            0..3,
        ),
    )
        .prop_map(|(name, ns, replicas, labels, aa, node_affinity, containers)| {
            let mut spec = Map::new();
            if let Some(r) = replicas {
                spec.insert("replicas".into(), json!(r));
            }
            if let Some(l) = labels {
                spec.insert("selector".into(), json!({"matchLabels": l}));
            }
            let mut affinity = Map::new();
            let mut pod_spec_affinity_null = false;
            if let Some(aa) = aa {
                affinity.insert("podAntiAffinity".into(), aa);
            }
            if node_affinity && replicas.is_none_or(|r| r < 3) {
                // some manifests carry `affinity: null`
                pod_spec_affinity_null = true;
            } else if node_affinity {
                affinity.insert("nodeAffinity".into(), json!({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}));
            }
            let containers: Vec<Value> = containers
                .into_iter()
                .map(|(cname, args)| {
                    let cname = if cname == "same" { name } else { cname };
                    let mut c = json!({"name": cname, "image": "img"});
                    if let Some(args) = args {
                        c["args"] = json!(args);
                    }
                    c
                })
                .collect();
            let mut pod_spec = json!({"containers": containers});
            if !affinity.is_empty() {
                pod_spec["affinity"] = Value::Object(affinity);
            } else if pod_spec_affinity_null {
                pod_spec["affinity"] = Value::Null;
            }
            spec.insert("template".into(), json!({"metadata": {"labels": {"app": "x"}}, "spec": pod_spec}));
            (
                obj(vec![
                    ("apiVersion", json!("apps/v1")),
                    ("kind", json!("Deployment")),
                    ("metadata", metadata(name, ns)),
                    ("spec", Value::Object(spec)),
                ]),
                ns,
            )
        })
}

/// Integers at the edges of what the engine may multiply, add or subtract:
/// unchecked arithmetic on them overflows.
fn arb_extreme() -> impl Strategy<Value = i64> {
    prop::sample::select(vec![
        i64::MAX,
        i64::MIN,
        i64::MAX / 25 + 1,
        i64::from(i32::MAX),
        i64::from(i32::MIN),
        -1,
    ])
}

fn arb_hpa() -> impl Strategy<Value = (Value, Option<&'static str>)> {
    (
        prop::sample::select(vec!["autoscaling/v2", "autoscaling/v1"]),
        prop::sample::select(NAMES.to_vec()),
        prop::option::of(prop::sample::select(NAMESPACES.to_vec())),
        prop::option::of(prop_oneof![4 => 1..8i64, 1 => arb_extreme()]),
        prop_oneof![4 => 1..30i64, 1 => arb_extreme()],
        prop::sample::select(vec!["Deployment", "StatefulSet"]),
    )
        .prop_map(|(api, name, ns, min, max, kind)| {
            let mut spec = json!({"maxReplicas": max, "scaleTargetRef": {"apiVersion": "apps/v1", "kind": kind, "name": name}});
            if let Some(min) = min {
                spec["minReplicas"] = json!(min);
            }
            (obj(vec![("apiVersion", json!(api)), ("kind", json!("HorizontalPodAutoscaler")), ("metadata", metadata(name, ns)), ("spec", spec)]), ns)
        })
}

fn arb_pdb() -> impl Strategy<Value = (Value, Option<&'static str>)> {
    let v = prop_oneof![
        (0..4i64).prop_map(|n| json!(n)),
        (0..=100u32).prop_map(|n| json!(format!("{n}%"))),
        arb_extreme().prop_map(|n| json!(n)),
    ];
    (
        prop::sample::select(NAMES.to_vec()),
        prop::option::of(prop::sample::select(NAMESPACES.to_vec())),
        prop::option::of(v.clone()),
        prop::option::of(v),
    )
        .prop_map(|(app, ns, min, max)| {
            let mut spec = json!({"selector": {"matchLabels": {"app": app}}});
            if let Some(m) = min {
                spec["minAvailable"] = m;
            }
            if let Some(m) = max {
                spec["maxUnavailable"] = m;
            }
            (
                obj(vec![
                    ("apiVersion", json!("policy/v1")),
                    ("kind", json!("PodDisruptionBudget")),
                    ("metadata", metadata(&format!("{app}-pdb"), ns)),
                    ("spec", spec),
                ]),
                ns,
            )
        })
}

fn arb_configmap() -> impl Strategy<Value = (Value, Option<&'static str>)> {
    (
        prop::sample::select(vec!["config-leader-election", "config-autoscaler"]),
        prop::option::of(prop::sample::select(NAMESPACES.to_vec())),
        prop::option::of(prop::collection::btree_map(
            prop::sample::select(vec![
                "buckets",
                "lease-duration",
                "renew-deadline",
                "retry-period",
                // The legacy keys Knative still reads.
                "leaseDuration",
                "renewDeadline",
                "retryPeriod",
                "_example",
                "a/b~c",
            ])
            .prop_map(String::from),
            prop::sample::select(vec![
                "1",
                "5",
                "60s",
                "1m",
                "40s",
                "10s",
                "x",
                "0",
                // Durations at the edge of Go's int64 nanoseconds.
                "9223372036854775807ns",
                "2562047h47m16.854775807s",
                "2562048h",
                "94522879700260684295381835.9h",
            ])
            .prop_map(Value::from),
            0..5,
        )),
    )
        .prop_map(|(name, ns, data)| {
            let mut o = obj(vec![
                ("apiVersion", json!("v1")),
                ("kind", json!("ConfigMap")),
                ("metadata", metadata(name, ns)),
            ]);
            match data {
                Some(d) if d.len() <= 1 => o["data"] = Value::Null,
                Some(d) => o["data"] = Value::Object(d.into_iter().collect()),
                None => {}
            }
            (o, ns)
        })
}

fn arb_fixture() -> impl Strategy<Value = (Value, Option<&'static str>)> {
    let objects = support::fixture_objects();
    prop::sample::select(objects).prop_map(|o| {
        let ns = NAMESPACES
            .iter()
            .copied()
            .find(|n| o["metadata"]["namespace"] == *n);
        (o, ns)
    })
}

fn arb_object() -> impl Strategy<Value = (Value, Option<&'static str>)> {
    prop_oneof![
        arb_deployment(),
        arb_hpa(),
        arb_pdb(),
        arb_configmap(),
        arb_fixture()
    ]
}

fn arb_ctx() -> impl Strategy<Value = Context> {
    prop::sample::subsequence(NAMES.to_vec(), 0..3).prop_map(|names| Context {
        hpa_targets: names.into_iter().map(String::from).collect::<BTreeSet<_>>(),
        ..Default::default()
    })
}

fn run(policy: &Policy, ns: &str, object: &Value, ctx: &Context) -> engine::Mutated {
    let input = Input {
        operation: Operation::Update,
        namespace: ns,
        object,
    };
    engine::mutate_object(policy, &input, ctx).expect("valid objects never error")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn patch_applies_independently_matches_and_is_idempotent(
        policy in arb_policy(),
        (object, ns) in arb_object(),
        ctx in arb_ctx(),
    ) {
        let ns = ns.unwrap_or(&policy.spec.target_namespace).to_string();
        let outcome = run(&policy, &ns, &object, &ctx);
        let patch = serde_json::to_value(&outcome.mutation.patch).unwrap();
        let applied = apply_rfc6902(&object, &patch).map_err(|e| TestCaseError::fail(format!("{e}: {patch}")))?;
        let expected = outcome.object.clone().unwrap_or_else(|| object.clone());
        prop_assert_eq!(&applied, &expected);
        // and the json-patch crate (what a Rust client would use) agrees
        let mut with_crate = object.clone();
        json_patch::patch(&mut with_crate, &outcome.mutation.patch).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&with_crate, &expected);
        // change lines with a patch; without one, only warnings (timings
        // left alone, Operator-owned objects)
        if outcome.mutation.patch.0.is_empty() {
            prop_assert!(outcome.mutation.lines().iter().all(|c| c.contains(": warning: ")), "{:?}", outcome.mutation.changes);
        } else {
            prop_assert!(!outcome.mutation.changes.is_empty());
        }
        // deterministic
        let again = run(&policy, &ns, &object, &ctx);
        prop_assert_eq!(&again.mutation, &outcome.mutation);
        // idempotent
        let second = run(&policy, &ns, &applied, &ctx);
        prop_assert!(second.mutation.is_empty(), "second patch {:?}", second.mutation);
        prop_assert!(second.mutation.lines().iter().all(|c| c.contains(": warning: ")));
    }

    #[test]
    fn objects_outside_the_target_namespace_are_never_patched(
        policy in arb_policy(),
        (object, _) in arb_object(),
        ctx in arb_ctx(),
        other in "[a-z]{1,10}",
    ) {
        let target = policy.spec.target_namespace.clone();
        // request for another namespace
        prop_assume!(other != target);
        let mut o = object.clone();
        o["metadata"]["namespace"] = json!(other);
        prop_assert!(run(&policy, &other, &o, &ctx).mutation.is_empty());
        if let Some(m) = o["metadata"].as_object_mut() { m.remove("namespace"); }
        prop_assert!(run(&policy, &other, &o, &ctx).mutation.is_empty());
        // request claims the target namespace, object says otherwise
        o["metadata"]["namespace"] = json!(other);
        prop_assert!(run(&policy, &target, &o, &ctx).mutation.is_empty());
    }

    #[test]
    fn excluded_deployments_are_untouched(
        policy in arb_policy(),
        (object, _) in arb_deployment(),
        ctx in arb_ctx(),
    ) {
        let name = object["metadata"]["name"].as_str().unwrap().to_string();
        let mut policy = policy;
        policy.spec.workloads.retain(|w| w.name != name);
        policy.spec.exclude.push(name);
        let ns = policy.spec.target_namespace.clone();
        prop_assert!(run(&policy, &ns, &object, &ctx).mutation.is_empty());
    }

    #[test]
    fn hpas_are_never_lowered(
        policy in arb_policy(),
        (object, _) in arb_hpa(),
        ctx in arb_ctx(),
    ) {
        let ns = policy.spec.target_namespace.clone();
        let out = run(&policy, &ns, &object, &ctx);
        let after = out.object.unwrap_or_else(|| object.clone());
        let min = |v: &Value| v["spec"]["minReplicas"].as_i64().unwrap_or(1);
        let max = |v: &Value| v["spec"]["maxReplicas"].as_i64().unwrap();
        prop_assert!(min(&after) >= min(&object));
        prop_assert!(max(&after) >= max(&object));
        if out.mutation.changes.len() == 1 {
            prop_assert!(max(&after) >= min(&after));
        }
    }
}
