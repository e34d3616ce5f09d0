//! Properties of the engine over random valid policies and random (and real
//! Knative) objects: the patch applied by an independent RFC 6902 applier
//! equals the engine's mutated object; mutating the result again yields an
//! empty patch; objects outside the target namespace never get a patch;
//! same input, same output.

use crate::support;

use std::collections::BTreeSet;

use knative_ha_webhook::engine::{self, Input, Operation};
use knative_ha_webhook::policy::Policy;
use proptest::prelude::*;
use serde_json::{Map, Value, json};
use support::apply_rfc6902;
use support::policygen::{self, AntiAffinity, Budgets, LeaderElection, Shape, Spread, Workloads};

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

/// The random policies: over both namespaces, every field the engine reads,
/// globally and per workload, budgets as integers and percentages.
const SHAPE: Shape = Shape {
    namespaces: NAMESPACES,
    replicas: Some(1..=9),
    leader_election: Some(LeaderElection {
        buckets: 1..=10,
        durations: &[
            policygen::NO_DURATIONS,
            (Some("60s"), Some("40s"), Some("10s")),
            (Some("15s"), Some("10s"), Some("2s")),
            (Some("2m"), None, None),
            (None, None, Some("500ms")),
            (Some("1m30s"), Some("1m"), Some("1.5s")),
        ],
    }),
    anti_affinity: Some(AntiAffinity {
        keys: &[policygen::HOSTNAME, policygen::ZONE],
    }),
    spread: Some(Spread {
        keys: &[policygen::ZONE, policygen::HOSTNAME],
        max_skew: 1..=2,
    }),
    budgets: Some(Budgets {
        ints: 0..=4,
        percents: Some(0..=100),
        per_workload: true,
    }),
    priority_classes: &["knative-control-plane", "system-cluster-critical"],
    workloads: Workloads {
        names: NAMES,
        most: 3,
        exclude: 2,
    },
    operator_owned: true,
};

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

/// The HPA targets known in the object's namespace.
fn arb_ctx() -> impl Strategy<Value = BTreeSet<String>> {
    prop::sample::subsequence(NAMES.to_vec(), 0..3)
        .prop_map(|names| names.into_iter().map(String::from).collect::<BTreeSet<_>>())
}

fn run(policy: &Policy, ns: &str, object: &Value, ctx: &BTreeSet<String>) -> engine::Mutated {
    let input = Input {
        operation: Operation::Update,
        namespace: ns,
        object,
    };
    let known = engine::Snapshot::from_policies([policy.clone()]).knowing(ns, ctx.clone(), None);
    engine::outcome(engine::Answering::Governed(&known), &input).expect("valid objects never error")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn patch_applies_independently_matches_and_is_idempotent(
        policy in policygen::arb_policy(&SHAPE),
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

    /// A change says whether it writes the pod template (and so rolls the
    /// Deployment's pods), and it says so exactly: once the object's pod
    /// template is the one the policy wants, the engine's changes left are
    /// those that did not say so.
    #[test]
    fn changes_say_whether_they_roll_pods(
        policy in policygen::arb_policy(&SHAPE),
        (object, ns) in prop_oneof![arb_deployment(), arb_fixture()],
        ctx in arb_ctx(),
    ) {
        let ns = ns.unwrap_or(&policy.spec.target_namespace).to_string();
        let outcome = run(&policy, &ns, &object, &ctx);
        let mut aligned = object.clone();
        let wanted = outcome.object.as_ref().and_then(|o| o.pointer("/spec/template"));
        if let (Some(slot), Some(wanted)) = (aligned.pointer_mut("/spec/template"), wanted) {
            *slot = wanted.clone();
        }
        let rest = run(&policy, &ns, &aligned, &ctx).mutation.changes;
        for change in &outcome.mutation.changes {
            prop_assert_eq!(
                change.what.in_pod_template(),
                !rest.contains(change),
                "{}", change
            );
        }
    }

    #[test]
    fn objects_outside_the_target_namespace_are_never_patched(
        policy in policygen::arb_policy(&SHAPE),
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
        policy in policygen::arb_policy(&SHAPE),
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
        policy in policygen::arb_policy(&SHAPE),
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
