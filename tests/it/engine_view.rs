//! The engine's view of an object (`engine::view`: only the paths the
//! engine reads, parsed from the JSON text) gives the same answer, patch
//! and change lines, or the same error, as the whole object: on every
//! object of the Knative v1.23.0 fixtures (as they come and once patched),
//! under several policies and under random ones (`support/policygen.rs`),
//! and on arbitrary and mutated objects. This is what keeps the view's
//! `Shape` table honest: a path the engine reads that the table leaves out
//! turns these tests red.

use std::sync::LazyLock;

use arbitrary::Unstructured;
use knative_ha_webhook::engine::{self, Input, Operation};
use knative_ha_webhook::policy::Policy;
use proptest::prelude::*;
use serde_json::Value;

use crate::support::corpus;
use crate::support::fuzzgen;
use crate::support::policygen::{
    self, AntiAffinity, Budgets, LeaderElection, Shape, Spread, Workloads,
};

/// Policies that take the engine down different branches: the example,
/// leader election off, Required anti-affinity with spread constraints and
/// per-workload overrides, and PDBs by minAvailable.
const POLICIES: &[&str] = &[
    corpus::POLICY_YAML,
    include_str!("../../examples/policies/ha-disabled.yaml"),
    r#"
apiVersion: knativeha.dev/v1alpha1
kind: HighAvailabilityPolicy
metadata: {name: strict}
spec:
  targetNamespace: knative-serving
  replicas: 2
  leaderElection: {enabled: true, buckets: 3, leaseDuration: 15s, renewDeadline: 10s, retryPeriod: 2s}
  podAntiAffinity: {type: Required, topologyKey: topology.kubernetes.io/zone}
  topologySpreadConstraints:
    - {topologyKey: kubernetes.io/hostname, maxSkew: 1, whenUnsatisfiable: DoNotSchedule}
  podDisruptionBudget: {minAvailable: "50%"}
  workloads:
    - {name: controller, replicas: 4, podAntiAffinity: {type: None}}
    - {name: activator, replicas: 4, podDisruptionBudget: {minAvailable: 2}}
  exclude: [webhook]
  governOperatorOwned: true
"#,
    // A single duration, merged with what the ConfigMap holds
    // (the legacy keys too); HPAs raised from what someone else set.
    r#"
apiVersion: knativeha.dev/v1alpha1
kind: HighAvailabilityPolicy
metadata: {name: partial}
spec:
  targetNamespace: knative-serving
  replicas: 2
  leaderElection: {renewDeadline: 20s}
"#,
];

static POLICIES_PARSED: LazyLock<Vec<Policy>> = LazyLock::new(|| {
    POLICIES
        .iter()
        .map(|p| Policy::from_yaml(p).expect("test policy is valid"))
        .collect()
});

/// Every document of the fixtures, in the governed namespace.
static OBJECTS: LazyLock<Vec<Value>> = LazyLock::new(|| {
    corpus::manifest_documents()
        .iter()
        .map(|d| corpus::in_namespace(d, corpus::GOVERNED))
        .collect()
});

/// The answer as a comparable value: the patch and the lines, or the error.
fn answer(policy: &Policy, object: &Value) -> Result<(json_patch::Patch, Vec<String>), String> {
    let input = Input {
        operation: Operation::Create,
        namespace: corpus::GOVERNED,
        object,
    };
    engine::outcome(
        engine::Answering::Governed(&corpus::governing(policy)),
        &input,
    )
    .map(|o| o.mutation)
    .map(|m| (m.patch.clone(), m.lines()))
    .map_err(|e| e.to_string())
}

/// Checks the view of `object` against the whole object under every
/// policy, both parsed from the same text (as the request path did before:
/// serde_json's float parsing need not give back a float it printed).
fn same_answer(object: &Value) -> Result<(), String> {
    same_answer_under(&POLICIES_PARSED, object)
}

/// [`same_answer`] under `policies`.
fn same_answer_under(policies: &[Policy], object: &Value) -> Result<(), String> {
    let text = serde_json::to_string(object).expect("serialisable");
    let object: Value = serde_json::from_str(&text).expect("valid JSON");
    let view = engine::view::parse(&text).map_err(|e| format!("view: {e}"))?;
    for policy in policies {
        let (full, pruned) = (answer(policy, &object), answer(policy, &view));
        if full != pruned {
            return Err(format!(
                "policy {}: the view answers differently\nobject: {object}\nview: {view}\n\
                 whole: {full:?}\nview: {pruned:?}",
                policy.name
            ));
        }
    }
    Ok(())
}

#[test]
fn every_fixture_object_as_it_comes_and_patched() {
    let mut patched = 0;
    for object in OBJECTS.iter() {
        same_answer(object).unwrap_or_else(|e| panic!("{}: {e}", corpus::label(object)));
        for policy in POLICIES_PARSED.iter() {
            let input = Input {
                operation: Operation::Create,
                namespace: corpus::GOVERNED,
                object,
            };
            let outcome = engine::outcome(
                engine::Answering::Governed(&corpus::governing(policy)),
                &input,
            )
            .expect("fixtures");
            if let Some(after) = outcome.object {
                patched += 1;
                same_answer(&after).unwrap_or_else(|e| {
                    panic!("{} patched by {}: {e}", corpus::label(object), policy.name)
                });
            }
        }
    }
    assert!(patched >= 20, "only {patched} objects were patched");
}

#[test]
fn the_view_is_smaller_than_the_object() {
    let controller = corpus::controller_deployment();
    let text = serde_json::to_string(&controller).unwrap();
    let view = engine::view::parse(&text).unwrap();
    assert!(view.to_string().len() * 2 < text.len(), "{view}");
}

/// Arbitrary JSON built from the keys the engine looks for, so that the
/// kinds it governs and the paths it reads come up often.
fn arb_object() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-3i64..6).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        prop::sample::select(vec![
            "apps/v1",
            "v1",
            "policy/v1",
            "autoscaling/v2",
            "Deployment",
            "ConfigMap",
            "HorizontalPodAutoscaler",
            "PodDisruptionBudget",
            "controller",
            "activator",
            "config-leader-election",
            "knative-serving",
            "30s",
            "true",
            "RollingUpdate",
            "25%",
            "--disable-ha",
            "operator.knative.dev/v1beta1",
        ])
        .prop_map(Value::from),
        "[a-z/.-]{0,8}".prop_map(Value::from),
    ];
    let keys = prop::sample::select(vec![
        "apiVersion",
        "kind",
        "metadata",
        "name",
        "namespace",
        "generateName",
        "annotations",
        "labels",
        "ownerReferences",
        "spec",
        "replicas",
        "selector",
        "matchLabels",
        "app",
        "template",
        "affinity",
        "podAntiAffinity",
        "topologySpreadConstraints",
        "containers",
        "args",
        "strategy",
        "type",
        "rollingUpdate",
        "maxUnavailable",
        "minAvailable",
        "scaleTargetRef",
        "minReplicas",
        "maxReplicas",
        "data",
        "buckets",
        "lease-duration",
        "renew-deadline",
        "retry-period",
        "leaseDuration",
        "renewDeadline",
        "retryPeriod",
        "status",
        "image",
    ]);
    leaf.prop_recursive(6, 96, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(keys.clone().prop_map(String::from), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// The random policies: every field the engine reads, globally and per
/// workload, Operator-owned governance too.
const SHAPE: Shape = Shape {
    namespaces: &[corpus::GOVERNED],
    replicas: Some(1..=5),
    leader_election: Some(LeaderElection {
        buckets: 1..=10,
        durations: &[
            policygen::NO_DURATIONS,
            (Some("15s"), Some("10s"), Some("2s")),
            (None, Some("20s"), None),
            (Some("1m30s"), None, None),
            (None, None, Some("5s")),
        ],
    }),
    anti_affinity: Some(AntiAffinity {
        keys: &[policygen::HOSTNAME, policygen::ZONE],
    }),
    spread: Some(Spread {
        keys: &[policygen::ZONE],
        max_skew: 1..=3,
    }),
    budgets: Some(Budgets {
        ints: 1..=2,
        percents: Some(50..=50),
        per_workload: true,
    }),
    priority_classes: &["knative-control-plane", "system-cluster-critical"],
    workloads: Workloads {
        names: policygen::DEPLOYMENTS,
        most: 2,
        exclude: 1,
    },
    operator_owned: true,
};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Every fixture object, as it comes and patched, under a random policy.
    #[test]
    fn fixture_objects_under_random_policies(
        policy in policygen::arb_policy(&SHAPE),
        index in 0..1000usize,
    ) {
        let object = &OBJECTS[index % OBJECTS.len()];
        let policies = std::slice::from_ref(&policy);
        let same = same_answer_under(policies, object);
        prop_assert!(same.is_ok(), "{}", same.unwrap_err());
        let input = Input { operation: Operation::Create, namespace: corpus::GOVERNED, object };
        let outcome = engine::outcome(engine::Answering::Governed(&corpus::governing(&policy)), &input);
        if let Ok(engine::Mutated { object: Some(after), .. }) = outcome {
            let same = same_answer_under(policies, &after);
            prop_assert!(same.is_ok(), "patched: {}", same.unwrap_err());
        }
    }

    #[test]
    fn arbitrary_objects(object in arb_object()) {
        prop_assert!(same_answer(&object).is_ok(), "{}", same_answer(&object).unwrap_err());
    }

    #[test]
    fn arbitrary_objects_of_a_governed_kind(
        mut object in arb_object(),
        which in 0..4usize,
    ) {
        let (api, kind) = [
            ("apps/v1", "Deployment"),
            ("v1", "ConfigMap"),
            ("autoscaling/v2", "HorizontalPodAutoscaler"),
            ("policy/v1", "PodDisruptionBudget"),
        ][which];
        if let Some(map) = object.as_object_mut() {
            map.insert("apiVersion".into(), api.into());
            map.insert("kind".into(), kind.into());
        }
        prop_assert!(same_answer(&object).is_ok(), "{}", same_answer(&object).unwrap_err());
    }

    #[test]
    fn mutated_fixture_objects(
        index in 0..1000usize,
        bytes in prop::collection::vec(any::<u8>(), 16..256),
    ) {
        let base = &OBJECTS[index % OBJECTS.len()];
        let mut u = Unstructured::new(&bytes);
        if let Ok(object) = fuzzgen::mutate(&mut u, base, "") {
            prop_assert!(same_answer(&object).is_ok(), "{}", same_answer(&object).unwrap_err());
        }
    }
}

/// What the rules over an object's life read is in the view: the
/// legacy leader-election keys Knative still reads, the opt-out label.
#[test]
fn what_the_lifecycle_rules_read_is_kept() {
    let mut cm = OBJECTS
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["name"] == "config-leader-election")
        .expect("config-leader-election")
        .clone();
    cm["data"]["retryPeriod"] = "30s".into();
    same_answer(&cm).unwrap();
    cm["data"]["renewDeadline"] = "10s".into();
    cm["data"]["leaseDuration"] = "15s".into();
    same_answer(&cm).unwrap();
    // The opt-out label.
    cm["metadata"]["labels"]["knativeha.dev/skip"] = "true".into();
    same_answer(&cm).unwrap();
}

/// A budget the reconciler created (it carries the created-for
/// annotation): the webhook leaves it alone through the view as on the
/// whole object.
#[test]
fn a_created_budget_is_left_alone_through_the_view() {
    let pdb = serde_json::json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "controller-pdb", "namespace": corpus::GOVERNED,
                     "annotations": {"knativeha.dev/created-for": "controller"}},
        "spec": {"maxUnavailable": 2, "selector": {"matchLabels": {"app": "controller"}}}
    });
    same_answer(&pdb).unwrap();
}
