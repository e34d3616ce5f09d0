//! The engine on the real Knative v1.23.0 manifests: the exact patch and
//! change lines for every governed object, with the example policy and with
//! the leader-election-off policy.

use crate::support;

use std::collections::BTreeSet;

use knative_ha_webhook::engine::{self, Input, Operation};
use knative_ha_webhook::policy::Policy;
use serde_json::{Value, json};
use support::{apply_rfc6902, fixture, load_policy};

fn run(policy: &Policy, namespace: &str, object: &Value) -> (Value, Vec<String>) {
    let input = Input {
        operation: Operation::Create,
        namespace,
        object,
    };
    let m = engine::outcome(
        engine::Answering::Governed(&engine::Snapshot::from_policies([Policy::clone(policy)])),
        &input,
    )
    .map(|o| o.mutation)
    .expect("engine succeeds");
    without_hash(serde_json::to_value(&m.patch).unwrap(), m.lines())
}

/// Sets aside what every leader-elected Deployment gets when the policy has
/// leader election settings: the settings hash annotation and `maxSurge:
/// 100%` (tests/it/engine_knative_ha.rs and engine_leader_hash.rs check
/// them), so the cases below keep stating the other changes exactly.
/// Also sets aside the records of the release values (the engine records a
/// field before its first change; tests/it/engine_restore.rs checks them).
/// The HPA's and the PDB's records (engine::hpa, engine::pdb) stay.
fn without_hash(mut patch: Value, changes: Vec<String>) -> (Value, Vec<String>) {
    const HASH: &str = "leader-election-hash";
    const SURGE: &str = "maxSurge";
    let leader_rule = |text: &str| text.contains(HASH) || text.contains(SURGE);
    if let Some(ops) = patch.as_array_mut() {
        ops.retain(|op| !leader_rule(&op.to_string()));
        ops.iter_mut().for_each(without_records);
        ops.retain(|op| !op.is_null());
    }
    (
        patch,
        changes.into_iter().filter(|c| !leader_rule(c)).collect(),
    )
}

/// `op` without the record annotations of `engine::restore` and the
/// ConfigMap keys' last writes (null when
/// nothing else is left of it).
fn without_records(op: &mut Value) {
    let is_record = |key: &str| {
        (key.starts_with("knativeha.dev/original-")
            && !key.ends_with("-min-replicas")
            && !key.ends_with("-max-replicas")
            && key != "knativeha.dev/original-budget")
            || key.starts_with("knativeha.dev/written-data-")
    };
    let path = op["path"].as_str().unwrap_or("").to_string();
    if let Some(key) = path.strip_prefix("/metadata/annotations/") {
        if is_record(&key.replace("~1", "/").replace("~0", "~")) {
            *op = Value::Null;
        }
    } else if path == "/metadata/annotations" || path == "/metadata" {
        let map = if path == "/metadata" {
            op["value"]["annotations"].as_object_mut()
        } else {
            op["value"].as_object_mut()
        };
        if let Some(map) = map {
            map.retain(|k, _| !is_record(k));
            if map.is_empty() {
                *op = Value::Null;
            }
        }
    }
}

struct Case {
    name: &'static str,
    kind: &'static str,
    namespace: &'static str,
    object: &'static str,
    patch: Value,
    changes: &'static [&'static str],
}

fn example_cases() -> Vec<Case> {
    vec![
        Case {
            name: "activator deployment: HPA-backed (no replicas), Knative's Preferred term already satisfies the policy",
            kind: "Deployment",
            namespace: "knative-serving",
            object: "activator",
            patch: json!([]),
            changes: &[],
        },
        Case {
            name: "autoscaler deployment: replicas 1 -> 3; Knative's Preferred term already does the job",
            kind: "Deployment",
            namespace: "knative-serving",
            object: "autoscaler",
            patch: json!([{"op": "replace", "path": "/spec/replicas", "value": 3}]),
            changes: &["deployment/autoscaler: spec.replicas 1 -> 3 (policy serving)"],
        },
        Case {
            name: "controller deployment: replicas added (the manifest has none)",
            kind: "Deployment",
            namespace: "knative-serving",
            object: "controller",
            patch: json!([{"op": "add", "path": "/spec/replicas", "value": 3}]),
            changes: &["deployment/controller: spec.replicas unset -> 3 (policy serving)"],
        },
        Case {
            name: "webhook deployment: HPA-backed (no replicas), Preferred already satisfied",
            kind: "Deployment",
            namespace: "knative-serving",
            object: "webhook",
            patch: json!([]),
            changes: &[],
        },
        Case {
            name: "autoscaler-hpa deployment: 3 replicas (leader-elected: restarted with the others)",
            kind: "Deployment",
            namespace: "knative-serving",
            object: "autoscaler-hpa",
            patch: json!([{"op": "add", "path": "/spec/replicas", "value": 3}]),
            changes: &["deployment/autoscaler-hpa: spec.replicas unset -> 3 (policy serving)"],
        },
        Case {
            name: "net-kourier-controller deployment: replicas and a new affinity block",
            kind: "Deployment",
            namespace: "knative-serving",
            object: "net-kourier-controller",
            patch: json!([
                {"op": "replace", "path": "/spec/replicas", "value": 3},
                {"op": "add", "path": "/spec/template/spec/affinity", "value": {"podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm":
                        {"labelSelector": {"matchLabels": {"app": "net-kourier-controller"},
                          "matchExpressions": [{"key": "knativeha.dev/anti-affinity", "operator": "DoesNotExist"}]},
                         "matchLabelKeys": ["pod-template-hash"],
                         "topologyKey": "kubernetes.io/hostname"}}]
                }}}
            ]),
            changes: &[
                "deployment/net-kourier-controller: spec.replicas 1 -> 3 (policy serving)",
                "deployment/net-kourier-controller: pod anti-affinity set to Preferred on kubernetes.io/hostname (policy serving)",
            ],
        },
        Case {
            name: "activator HPA: minReplicas to the override 5, maxReplicas raised by 4",
            kind: "HorizontalPodAutoscaler",
            namespace: "knative-serving",
            object: "activator",
            patch: json!([
                {"op": "add", "path": "/metadata/annotations", "value": {"knativeha.dev/original-min-replicas": "1"}},
                {"op": "add", "path": "/metadata/annotations/knativeha.dev~1original-max-replicas", "value": "20"},
                {"op": "add", "path": "/metadata/annotations/knativeha.dev~1written-min-replicas", "value": "5"},
                {"op": "add", "path": "/metadata/annotations/knativeha.dev~1written-max-replicas", "value": "24"},
                {"op": "replace", "path": "/spec/minReplicas", "value": 5},
                {"op": "replace", "path": "/spec/maxReplicas", "value": 24}
            ]),
            changes: &[
                "horizontalpodautoscaler/activator: spec.minReplicas 1 -> 5, spec.maxReplicas 20 -> 24 (from the original 1/20) (policy serving)",
            ],
        },
        Case {
            name: "webhook HPA: minReplicas to the global 3, maxReplicas raised by 2",
            kind: "HorizontalPodAutoscaler",
            namespace: "knative-serving",
            object: "webhook",
            patch: json!([
                {"op": "add", "path": "/metadata/annotations", "value": {"knativeha.dev/original-min-replicas": "1"}},
                {"op": "add", "path": "/metadata/annotations/knativeha.dev~1original-max-replicas", "value": "5"},
                {"op": "add", "path": "/metadata/annotations/knativeha.dev~1written-min-replicas", "value": "3"},
                {"op": "add", "path": "/metadata/annotations/knativeha.dev~1written-max-replicas", "value": "7"},
                {"op": "replace", "path": "/spec/minReplicas", "value": 3},
                {"op": "replace", "path": "/spec/maxReplicas", "value": 7}
            ]),
            changes: &[
                "horizontalpodautoscaler/webhook: spec.minReplicas 1 -> 3, spec.maxReplicas 5 -> 7 (from the original 1/5) (policy serving)",
            ],
        },
        Case {
            // From 5 activators up (the HPA scales them), the release's 80%
            // allows the fewest disruptions beyond the policy's 1 of any
            // value of its field (minAvailable 4 let 19 of 23 go at once).
            name: "activator-pdb: the release's 80% kept, closest to maxUnavailable 1 from 5 up",
            kind: "PodDisruptionBudget",
            namespace: "knative-serving",
            object: "activator-pdb",
            patch: json!([]),
            changes: &[],
        },
        Case {
            name: "webhook-pdb: maxUnavailable 1 from 3 up as minAvailable 66%, the release's field",
            kind: "PodDisruptionBudget",
            namespace: "knative-serving",
            object: "webhook-pdb",
            patch: json!([
                {"op": "replace", "path": "/spec/minAvailable", "value": "66%"},
                {"op": "add", "path": "/metadata/annotations", "value": {"knativeha.dev/original-budget": "{\"minAvailable\":\"80%\"}"}},
                {"op": "add", "path": "/metadata/annotations/knativeha.dev~1written-budget", "value": "{\"minAvailable\":\"66%\"}"}
            ]),
            changes: &[
                "poddisruptionbudget/webhook-pdb: spec.minAvailable \"80%\" -> \"66%\" (the policy's maxUnavailable 1 with 3 replicas (spec.replicas) and above, in the field the release sets) (policy serving)",
            ],
        },
        Case {
            name: "config-leader-election: the four keys as strings, _example untouched",
            kind: "ConfigMap",
            namespace: "knative-serving",
            object: "config-leader-election",
            patch: json!([
                {"op": "add", "path": "/data/buckets", "value": "5"},
                {"op": "add", "path": "/data/lease-duration", "value": "60s"},
                {"op": "add", "path": "/data/renew-deadline", "value": "40s"},
                {"op": "add", "path": "/data/retry-period", "value": "10s"}
            ]),
            changes: &[
                "configmap/config-leader-election: data.buckets unset -> \"5\" (policy serving)",
                "configmap/config-leader-election: data.lease-duration unset -> \"60s\" (policy serving)",
                "configmap/config-leader-election: data.renew-deadline unset -> \"40s\" (policy serving)",
                "configmap/config-leader-election: data.retry-period unset -> \"10s\" (policy serving)",
            ],
        },
        Case {
            name: "config-autoscaler: an unrelated ConfigMap is untouched",
            kind: "ConfigMap",
            namespace: "knative-serving",
            object: "config-autoscaler",
            patch: json!([]),
            changes: &[],
        },
        Case {
            name: "config-kourier (knative-serving, from the Kourier file): untouched",
            kind: "ConfigMap",
            namespace: "knative-serving",
            object: "config-kourier",
            patch: json!([]),
            changes: &[],
        },
        Case {
            name: "3scale-kourier-gateway deployment in kourier-system: other namespace, untouched",
            kind: "Deployment",
            namespace: "kourier-system",
            object: "3scale-kourier-gateway",
            patch: json!([]),
            changes: &[],
        },
        Case {
            name: "3scale-kourier-gateway HPA in kourier-system: untouched",
            kind: "HorizontalPodAutoscaler",
            namespace: "kourier-system",
            object: "3scale-kourier-gateway",
            patch: json!([]),
            changes: &[],
        },
        Case {
            name: "3scale-kourier-gateway-pdb in kourier-system: untouched",
            kind: "PodDisruptionBudget",
            namespace: "kourier-system",
            object: "3scale-kourier-gateway-pdb",
            patch: json!([]),
            changes: &[],
        },
    ]
}

/// A case's patch and changes with what the example's zone spread and
/// PriorityClass add to every governed Deployment of knative-serving (last
/// in its patch, in that order).
fn with_example_placement(case: &Case, object: &Value) -> (Value, Vec<String>) {
    let mut patch = case.patch.clone();
    let mut changes: Vec<String> = case.changes.iter().map(|c| c.to_string()).collect();
    if case.kind == "Deployment" && case.namespace == "knative-serving" {
        let labels = object["spec"]["selector"]["matchLabels"].clone();
        let ops = patch.as_array_mut().unwrap();
        ops.push(json!({"op": "add", "path": "/spec/template/spec/topologySpreadConstraints", "value": [{
            "labelSelector": {"matchLabels": labels}, "matchLabelKeys": ["pod-template-hash"], "maxSkew": 1,
            "nodeTaintsPolicy": "Honor", "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway"}]}));
        ops.push(json!({"op": "add", "path": "/spec/template/spec/priorityClassName", "value": "knative-control-plane"}));
        let name = case.object;
        changes.push(format!("deployment/{name}: topology spread set to topology.kubernetes.io/zone (maxSkew 1, ScheduleAnyway, nodeTaintsPolicy Honor, per ReplicaSet) (policy serving)"));
        changes.push(format!("deployment/{name}: spec.template.spec.priorityClassName unset -> knative-control-plane (the PriorityClass must exist: pods naming one that does not are refused) (policy serving)"));
    }
    (patch, changes)
}

/// `examples/policy.yaml` without its zone spread and PriorityClass: the
/// narrow cases below state the other changes exactly (the two are checked
/// in `example_policy_on_knative_v1_23_0` and their own tests).
fn example_policy() -> Policy {
    let mut policy = load_policy("examples/policy.yaml");
    policy.spec.topology_spread_constraints = None;
    policy.spec.priority_class_name = None;
    policy
}

#[test]
fn example_policy_on_knative_v1_23_0() {
    let policy = load_policy("examples/policy.yaml");
    for case in example_cases() {
        let object = fixture(case.kind, case.namespace, case.object);
        let (patch, changes) = run(&policy, case.namespace, &object);
        let (want_patch, want_changes) = with_example_placement(&case, &object);
        assert_eq!(patch, want_patch, "{}: patch", case.name);
        assert_eq!(changes, want_changes, "{}: changes", case.name);
        // The patch applies with an independent applier, and the result is a fixed point.
        let patched =
            apply_rfc6902(&object, &patch).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let (again, again_changes) = run(&policy, case.namespace, &patched);
        assert_eq!(again, json!([]), "{}: not idempotent", case.name);
        assert!(again_changes.is_empty(), "{}", case.name);
        if case.kind == "ConfigMap" {
            assert_eq!(
                patched["data"]["_example"], object["data"]["_example"],
                "{}",
                case.name
            );
            assert_eq!(patched["metadata"], object["metadata"], "{}", case.name);
        }
    }
}

#[test]
fn kourier_system_objects_are_untouched_even_when_the_request_says_knative_serving() {
    // The object's own metadata.namespace disagrees with the request: no patch.
    let policy = example_policy();
    for (kind, name) in [
        ("Deployment", "3scale-kourier-gateway"),
        ("HorizontalPodAutoscaler", "3scale-kourier-gateway"),
        ("PodDisruptionBudget", "3scale-kourier-gateway-pdb"),
    ] {
        let object = fixture(kind, "kourier-system", name);
        let (patch, _) = run(&policy, "knative-serving", &object);
        assert_eq!(patch, json!([]), "{kind} {name}");
    }
}

#[test]
fn delete_and_connect_are_never_mutated() {
    let policy = example_policy();
    let object = fixture("Deployment", "knative-serving", "controller");
    for operation in [Operation::Delete, Operation::Connect] {
        let input = Input {
            operation,
            namespace: "knative-serving",
            object: &object,
        };
        let m = engine::outcome(
            engine::Answering::Governed(&engine::Snapshot::from_policies([Policy::clone(&policy)])),
            &input,
        )
        .map(|o| o.mutation)
        .unwrap();
        assert!(m.is_empty() && m.changes.is_empty(), "{operation:?}");
    }
    let input = Input {
        operation: Operation::Update,
        namespace: "knative-serving",
        object: &object,
    };
    assert!(
        !engine::outcome(
            engine::Answering::Governed(&engine::Snapshot::from_policies([Policy::clone(&policy)])),
            &input
        )
        .map(|o| o.mutation)
        .unwrap()
        .is_empty()
    );
}

#[test]
fn leader_election_disabled_policy() {
    let policy = load_policy("examples/policies/ha-disabled.yaml");
    let ns = "knative-serving";

    // Non-HPA Deployments go back to one replica; controller/autoscaler never get --disable-ha.
    let mut controller = fixture("Deployment", ns, "controller");
    controller["spec"]["replicas"] = json!(3);
    let (patch, changes) = run(&policy, ns, &controller);
    assert_eq!(
        patch,
        json!([{"op": "replace", "path": "/spec/replicas", "value": 1}])
    );
    assert_eq!(
        changes,
        ["deployment/controller: spec.replicas 3 -> 1 (policy serving-single)"]
    );
    let (patch, _) = run(&policy, ns, &fixture("Deployment", ns, "autoscaler"));
    assert_eq!(
        patch,
        json!([]),
        "autoscaler already has 1 replica and must not get the flag"
    );

    // An HPA scales the webhook: never the flag there (it would stop
    // leader election on every replica the HPA adds).
    let (patch, _) = run(&policy, ns, &fixture("Deployment", ns, "webhook"));
    assert_eq!(patch, json!([]), "webhook is HPA-backed");

    // Binaries that accept --disable-ha get it, once.
    for (name, container) in [
        ("autoscaler-hpa", "autoscaler-hpa"),
        ("net-kourier-controller", "controller"),
    ] {
        let object = fixture("Deployment", ns, name);
        let (patch, changes) = run(&policy, ns, &object);
        assert_eq!(
            patch,
            json!([{"op": "add", "path": "/spec/template/spec/containers/0/args", "value": ["--disable-ha"]}]),
            "{name}"
        );
        assert_eq!(
            changes,
            [format!(
                "deployment/{name}: container {container} args + --disable-ha (policy serving-single)"
            )]
        );
        let patched = apply_rfc6902(&object, &patch).unwrap();
        assert_eq!(
            run(&policy, ns, &patched).0,
            json!([]),
            "{name}: flag added twice"
        );
    }

    // An existing args list gets the flag appended at an explicit index.
    let mut hpa_d = fixture("Deployment", ns, "autoscaler-hpa");
    hpa_d["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["-v"]);
    let (patch, _) = run(&policy, ns, &hpa_d);
    assert_eq!(
        patch,
        json!([{"op": "add", "path": "/spec/template/spec/containers/0/args/1", "value": "--disable-ha"}])
    );

    // HPAs are left alone (never lowered), buckets becomes 1.
    for name in ["activator", "webhook"] {
        let (patch, _) = run(&policy, ns, &fixture("HorizontalPodAutoscaler", ns, name));
        assert_eq!(patch, json!([]), "HPA {name}");
    }
    let (patch, changes) = run(
        &policy,
        ns,
        &fixture("ConfigMap", ns, "config-leader-election"),
    );
    assert_eq!(
        patch,
        json!([{"op": "add", "path": "/data/buckets", "value": "1"}])
    );
    assert_eq!(
        changes,
        ["configmap/config-leader-election: data.buckets unset -> \"1\" (policy serving-single)"]
    );
}

#[test]
fn enabling_leader_election_removes_disable_ha() {
    let policy = example_policy();
    let mut webhook = fixture("Deployment", "knative-serving", "webhook");
    webhook["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["--disable-ha", "-v"]);
    let (patch, changes) = run(&policy, "knative-serving", &webhook);
    assert_eq!(
        patch,
        json!([{"op": "remove", "path": "/spec/template/spec/containers/0/args/0"}])
    );
    assert_eq!(
        changes,
        ["deployment/webhook: container webhook args - --disable-ha (policy serving)"]
    );
    // ... and from any Deployment that ends with more than one replica
    // (the flag only ever stays on a single, non-HPA replica).
    let mut controller = fixture("Deployment", "knative-serving", "controller");
    controller["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["--disable-ha"]);
    let (patch, _) = run(&policy, "knative-serving", &controller);
    assert_eq!(
        patch,
        json!([
            {"op": "add", "path": "/spec/replicas", "value": 3},
            // the flag was all of args: no `args: []` left
            {"op": "remove", "path": "/spec/template/spec/containers/0/args"}
        ])
    );
}

#[test]
fn hpa_targets_from_context_are_not_given_replicas() {
    let policy = example_policy();
    let object = fixture("Deployment", "knative-serving", "autoscaler");
    let input = Input {
        operation: Operation::Create,
        namespace: "knative-serving",
        object: &object,
    };
    let plain = engine::outcome(
        engine::Answering::Governed(&engine::Snapshot::from_policies([Policy::clone(&policy)])),
        &input,
    )
    .map(|o| o.mutation)
    .unwrap();
    assert!(
        serde_json::to_value(&plain.patch)
            .unwrap()
            .to_string()
            .contains("/spec/replicas")
    );
    let known = engine::Snapshot::from_policies([policy.clone()]).knowing(
        "knative-serving",
        BTreeSet::from(["autoscaler".to_string()]),
        None,
    );
    let m = engine::outcome(engine::Answering::Governed(&known), &input)
        .unwrap()
        .mutation;
    let (patch, changes) = without_hash(serde_json::to_value(&m.patch).unwrap(), m.lines());
    assert_eq!(
        patch,
        json!([]),
        "an HPA owns autoscaler's replicas now: {changes:?}"
    );
}

#[test]
fn hpa_is_never_lowered_and_max_keeps_up() {
    let policy = example_policy();
    let mut hpa = fixture("HorizontalPodAutoscaler", "knative-serving", "webhook");
    hpa["spec"]["minReplicas"] = json!(4);
    hpa["spec"]["maxReplicas"] = json!(4);
    assert_eq!(
        run(&policy, "knative-serving", &hpa).0,
        json!([]),
        "min 4 >= 3: untouched"
    );
    hpa["spec"]["minReplicas"] = json!(2);
    hpa["spec"]["maxReplicas"] = json!(2);
    assert_eq!(
        run(&policy, "knative-serving", &hpa).0,
        json!([
            {"op": "add", "path": "/metadata/annotations", "value": {"knativeha.dev/original-min-replicas": "2"}},
            {"op": "add", "path": "/metadata/annotations/knativeha.dev~1original-max-replicas", "value": "2"},
            {"op": "add", "path": "/metadata/annotations/knativeha.dev~1written-min-replicas", "value": "3"},
            {"op": "add", "path": "/metadata/annotations/knativeha.dev~1written-max-replicas", "value": "3"},
            {"op": "replace", "path": "/spec/minReplicas", "value": 3},
            {"op": "replace", "path": "/spec/maxReplicas", "value": 3}
        ])
    );
    // autoscaling/v1 has the same fields
    hpa["apiVersion"] = json!("autoscaling/v1");
    hpa["spec"].as_object_mut().unwrap().remove("minReplicas");
    hpa["spec"]["maxReplicas"] = json!(10);
    let (patch, changes) = run(&policy, "knative-serving", &hpa);
    assert_eq!(
        patch,
        json!([
            {"op": "add", "path": "/metadata/annotations", "value": {"knativeha.dev/original-min-replicas": "1"}},
            {"op": "add", "path": "/metadata/annotations/knativeha.dev~1original-max-replicas", "value": "10"},
            {"op": "add", "path": "/metadata/annotations/knativeha.dev~1written-min-replicas", "value": "3"},
            {"op": "add", "path": "/metadata/annotations/knativeha.dev~1written-max-replicas", "value": "12"},
            {"op": "add", "path": "/spec/minReplicas", "value": 3},
            {"op": "replace", "path": "/spec/maxReplicas", "value": 12}
        ])
    );
    assert_eq!(
        changes,
        [
            "horizontalpodautoscaler/webhook: spec.minReplicas unset -> 3, spec.maxReplicas 10 -> 12 (from the original 1/10) (policy serving)"
        ]
    );
}

#[test]
fn hpa_of_an_excluded_deployment_is_untouched() {
    let mut policy = example_policy();
    policy.spec.exclude = vec!["autoscaler-hpa".into()];
    let mut hpa = fixture("HorizontalPodAutoscaler", "knative-serving", "webhook");
    hpa["spec"]["scaleTargetRef"]["name"] = json!("autoscaler-hpa");
    assert_eq!(run(&policy, "knative-serving", &hpa).0, json!([]));
}

#[test]
fn malformed_governed_objects_are_errors_naming_object_and_field() {
    let policy = example_policy();
    let ns = "knative-serving";
    let mut d = fixture("Deployment", ns, "controller");
    d["spec"]["replicas"] = json!("3");
    let mut h = fixture("HorizontalPodAutoscaler", ns, "webhook");
    h["spec"]["minReplicas"] = json!(true);
    let mut c = fixture("ConfigMap", ns, "config-leader-election");
    c["data"] = json!(["x"]);
    let mut c2 = fixture("ConfigMap", ns, "config-leader-election");
    c2["data"]["buckets"] = json!(3);
    let mut d2 = fixture("Deployment", ns, "controller");
    d2["spec"]["template"]["spec"]["affinity"] = json!("none");
    let cases = [
        (d, "Deployment knative-serving/controller", "spec.replicas"),
        (
            h,
            "HorizontalPodAutoscaler knative-serving/webhook",
            "spec.minReplicas",
        ),
        (
            c,
            "ConfigMap knative-serving/config-leader-election",
            "data",
        ),
        (
            c2,
            "ConfigMap knative-serving/config-leader-election",
            "data.buckets",
        ),
        (
            d2,
            "Deployment knative-serving/controller",
            "spec.template.spec.affinity",
        ),
    ];
    for (object, who, field) in cases {
        let input = Input {
            operation: Operation::Create,
            namespace: ns,
            object: &object,
        };
        let err = engine::outcome(
            engine::Answering::Governed(&engine::Snapshot::from_policies([Policy::clone(&policy)])),
            &input,
        )
        .map(|o| o.mutation)
        .expect_err(field)
        .to_string();
        assert!(err.contains(who) && err.contains(field), "{err}");
    }
    let input = Input {
        operation: Operation::Create,
        namespace: ns,
        object: &json!("not an object"),
    };
    assert!(
        engine::outcome(
            engine::Answering::Governed(&engine::Snapshot::from_policies([Policy::clone(&policy)])),
            &input
        )
        .map(|o| o.mutation)
        .is_err()
    );
}

#[test]
fn config_leader_election_without_data_gets_a_data_map() {
    let policy = example_policy();
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "config-leader-election", "namespace": "knative-serving"}});
    let (patch, _) = run(&policy, "knative-serving", &cm);
    assert_eq!(
        patch,
        json!([
            {"op": "add", "path": "/data", "value": {"buckets": "5"}},
            {"op": "add", "path": "/data/lease-duration", "value": "60s"},
            {"op": "add", "path": "/data/renew-deadline", "value": "40s"},
            {"op": "add", "path": "/data/retry-period", "value": "10s"}
        ])
    );
    assert_eq!(
        apply_rfc6902(&cm, &patch).unwrap()["data"],
        json!({"buckets": "5", "lease-duration": "60s", "renew-deadline": "40s", "retry-period": "10s"})
    );
    // Equal durations written differently are left as the user wrote them.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "config-leader-election", "namespace": "knative-serving"},
        "data": {"buckets": "5", "lease-duration": "1m", "renew-deadline": "40000ms", "retry-period": "10s"}});
    assert_eq!(run(&policy, "knative-serving", &cm).0, json!([]));
}

#[test]
fn pdb_values_keep_their_type() {
    let mut policy = example_policy();
    policy.spec.pod_disruption_budget =
        Some(knative_ha_webhook::policy::PodDisruptionBudgetPolicy {
            min_available: Some(
                k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("50%".into()),
            ),
            max_unavailable: None,
        });
    let pdb = fixture("PodDisruptionBudget", "knative-serving", "activator-pdb");
    let (patch, changes) = run(&policy, "knative-serving", &pdb);
    assert_eq!(
        patch,
        json!([
            {"op": "replace", "path": "/spec/minAvailable", "value": "50%"},
            {"op": "add", "path": "/metadata/annotations", "value": {"knativeha.dev/original-budget": "{\"minAvailable\":\"80%\"}"}},
            {"op": "add", "path": "/metadata/annotations/knativeha.dev~1written-budget", "value": "{\"minAvailable\":\"50%\"}"}
        ])
    );
    assert_eq!(
        changes,
        [
            "poddisruptionbudget/activator-pdb: spec.minAvailable \"80%\" -> \"50%\" (policy serving)"
        ]
    );
}

#[test]
fn deployment_without_match_labels_gets_no_anti_affinity_and_no_error() {
    let policy = example_policy();
    let mut d = fixture("Deployment", "knative-serving", "controller");
    d["spec"].as_object_mut().unwrap().remove("selector");
    let (patch, changes) = run(&policy, "knative-serving", &d);
    assert_eq!(
        patch,
        json!([{"op": "add", "path": "/spec/replicas", "value": 3}])
    );
    assert_eq!(changes.len(), 1);
}

#[test]
fn other_kinds_and_versions_are_ignored() {
    let policy = example_policy();
    let mut d = fixture("Deployment", "knative-serving", "controller");
    d["apiVersion"] = json!("apps/v1beta2");
    assert_eq!(run(&policy, "knative-serving", &d).0, json!([]));
    let svc = fixture("Service", "knative-serving", "controller");
    assert_eq!(run(&policy, "knative-serving", &svc).0, json!([]));
}

#[test]
fn topology_spread_constraints_select_the_deployments_own_pods() {
    let mut policy = example_policy();
    policy.spec.topology_spread_constraints =
        Some(vec![knative_ha_webhook::policy::TopologySpread {
            topology_key: "topology.kubernetes.io/zone".into(),
            max_skew: None,
            when_unsatisfiable: None,
            node_taints_policy: None,
        }]);
    let d = fixture("Deployment", "knative-serving", "activator");
    let (patch, changes) = run(&policy, "knative-serving", &d);
    assert_eq!(
        patch,
        json!([{"op": "add", "path": "/spec/template/spec/topologySpreadConstraints", "value": [{
            "labelSelector": {"matchLabels": {"app": "activator", "role": "activator"}},
            "matchLabelKeys": ["pod-template-hash"],
            "maxSkew": 1,
            "nodeTaintsPolicy": "Honor",
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway"
        }]}])
    );
    assert_eq!(
        changes,
        [
            "deployment/activator: topology spread set to topology.kubernetes.io/zone (maxSkew 1, ScheduleAnyway, nodeTaintsPolicy Honor, per ReplicaSet) (policy serving)"
        ]
    );
    let patched = apply_rfc6902(&d, &patch).unwrap();
    assert_eq!(run(&policy, "knative-serving", &patched).0, json!([]));
}

#[test]
fn required_anti_affinity_is_added_next_to_knatives_preferred_terms() {
    let mut policy = example_policy();
    policy.spec.pod_anti_affinity = Some(knative_ha_webhook::policy::PodAntiAffinity {
        kind: knative_ha_webhook::policy::AntiAffinityType::Required,
        topology_key: None,
    });
    for (name, labels) in [
        ("controller", json!({"app": "controller"})),
        ("autoscaler", json!({"app": "autoscaler"})),
    ] {
        let d = fixture("Deployment", "knative-serving", name);
        let (patch, changes) = run(&policy, "knative-serving", &d);
        // Knative's preferred term stays; the policy's term carries the
        // marker.
        let mut aa = d["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"].clone();
        aa["requiredDuringSchedulingIgnoredDuringExecution"] = json!([
            {"labelSelector": {"matchLabels": labels,
              "matchExpressions": [{"key": "knativeha.dev/anti-affinity", "operator": "DoesNotExist"}]},
             "matchLabelKeys": ["pod-template-hash"],
             "topologyKey": "kubernetes.io/hostname"}
        ]);
        let aa_op = json!({"op": "replace", "path": "/spec/template/spec/affinity/podAntiAffinity", "value": aa});
        assert!(
            patch.as_array().unwrap().contains(&aa_op),
            "{name}: {patch}"
        );
        assert!(
            changes.contains(&format!(
                "deployment/{name}: pod anti-affinity set to Required on kubernetes.io/hostname (policy serving)"
            )),
            "{changes:?}"
        );
        let patched = apply_rfc6902(&d, &patch).unwrap();
        assert_eq!(
            run(&policy, "knative-serving", &patched).0,
            json!([]),
            "{name}"
        );
        // nothing else in the pod spec moved
        let mut before = d["spec"]["template"]["spec"].clone();
        let mut after = patched["spec"]["template"]["spec"].clone();
        before["affinity"]
            .as_object_mut()
            .unwrap()
            .remove("podAntiAffinity");
        after["affinity"]
            .as_object_mut()
            .unwrap()
            .remove("podAntiAffinity");
        assert_eq!(before, after, "{name}");
    }
}

#[test]
fn required_anti_affinity_becomes_preferred_where_an_hpa_scales_the_deployment() {
    let mut policy = example_policy();
    policy.spec.pod_anti_affinity = Some(knative_ha_webhook::policy::PodAntiAffinity {
        kind: knative_ha_webhook::policy::AntiAffinityType::Required,
        topology_key: Some("topology.kubernetes.io/zone".into()),
    });
    for name in ["activator", "webhook"] {
        let d = fixture("Deployment", "knative-serving", name);
        let (patch, changes) = run(&policy, "knative-serving", &d);
        let patched = apply_rfc6902(&d, &patch).unwrap();
        let aa = &patched["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"];
        assert!(
            aa.get("requiredDuringSchedulingIgnoredDuringExecution")
                .is_none(),
            "{name}: {aa}"
        );
        let preferred = aa["preferredDuringSchedulingIgnoredDuringExecution"]
            .as_array()
            .unwrap();
        assert!(
            preferred.iter().any(|t| t["weight"] == 100
                && t["podAffinityTerm"]["topologyKey"] == "topology.kubernetes.io/zone"),
            "{name}: {aa}"
        );
        assert!(
            changes.contains(&format!(
                "deployment/{name}: pod anti-affinity set to Preferred, not the policy's Required: an HPA scales this Deployment, and its replicas beyond the number of topology.kubernetes.io/zone domains would stay Pending on topology.kubernetes.io/zone (policy serving)"
            )),
            "{changes:?}"
        );
        // No rollout rule and no stranding warning where Required is not written.
        assert!(
            !changes
                .iter()
                .any(|c| c.contains("maxUnavailable") || c.contains("warning:")),
            "{changes:?}"
        );
        assert_eq!(run(&policy, "knative-serving", &patched).0, json!([]));
    }
}

#[test]
fn required_anti_affinity_over_several_replicas_warns_naming_count_and_key() {
    let mut policy = example_policy();
    policy.spec.pod_anti_affinity = Some(knative_ha_webhook::policy::PodAntiAffinity {
        kind: knative_ha_webhook::policy::AntiAffinityType::Required,
        topology_key: Some("topology.kubernetes.io/zone".into()),
    });
    let d = fixture("Deployment", "knative-serving", "controller");
    let (patch, changes) = run(&policy, "knative-serving", &d);
    let warning = "deployment/controller: warning: Required anti-affinity on topology.kubernetes.io/zone puts each of the 3 replicas in its own topology.kubernetes.io/zone domain: with 3 domains or fewer, a replica stays Pending when one is lost or drained, and every later rollout waits for it (a topologySpreadConstraints entry with DoNotSchedule keeps replicas apart without stranding them) (policy serving)";
    assert!(changes.iter().any(|c| c == warning), "{changes:?}");
    // Said again on every admission, with nothing left to change.
    let patched = apply_rfc6902(&d, &patch).unwrap();
    let (again, changes) = run(&policy, "knative-serving", &patched);
    assert_eq!(again, json!([]));
    assert_eq!(changes, [warning]);
    // One replica: nothing to strand, and its rollout stays surge-first.
    policy.spec.replicas = Some(1);
    let (patch, changes) = run(&policy, "knative-serving", &d);
    assert!(
        !changes.iter().any(|c| c.contains("warning:")),
        "{changes:?}"
    );
    assert!(!patch.to_string().contains("maxUnavailable"), "{patch}");
}

#[test]
fn priority_class_is_set_recorded_and_put_back() {
    // The whole patch, records included (`run` sets them aside).
    let full = |policy: &Policy, object: &Value| {
        let input = Input {
            operation: Operation::Create,
            namespace: "knative-serving",
            object,
        };
        let m = engine::outcome(
            engine::Answering::Governed(&engine::Snapshot::from_policies([Policy::clone(policy)])),
            &input,
        )
        .map(|o| o.mutation)
        .unwrap();
        (serde_json::to_value(&m.patch).unwrap(), m.lines())
    };
    let mut policy = example_policy();
    policy.spec.priority_class_name = Some("knative-control-plane".into());
    let d = fixture("Deployment", "knative-serving", "activator");
    let (patch, changes) = full(&policy, &d);
    let patched = apply_rfc6902(&d, &patch).unwrap();
    assert_eq!(
        patched["spec"]["template"]["spec"]["priorityClassName"],
        "knative-control-plane"
    );
    assert_eq!(
        patched["metadata"]["annotations"]["knativeha.dev/original-priority-class-name"],
        "null"
    );
    assert!(
        changes.iter().any(|c| c.starts_with(
            "deployment/activator: spec.template.spec.priorityClassName unset -> knative-control-plane"
        )),
        "{changes:?}"
    );
    // A workload's own class wins.
    let mut own = policy.clone();
    own.spec.workloads[0].priority_class_name = Some("system-cluster-critical".into());
    let (p2, _) = full(&own, &patched);
    let p2 = apply_rfc6902(&patched, &p2).unwrap();
    assert_eq!(
        p2["spec"]["template"]["spec"]["priorityClassName"],
        "system-cluster-critical"
    );
    // No class any more: the release's (none) is back, the record gone.
    policy.spec.priority_class_name = None;
    let (p3, _) = full(&policy, &p2);
    let back = apply_rfc6902(&p2, &p3).unwrap();
    assert!(
        back["spec"]["template"]["spec"]
            .get("priorityClassName")
            .is_none()
    );
    assert!(
        back["metadata"]["annotations"]
            .get("knativeha.dev/original-priority-class-name")
            .is_none()
    );
    // restore puts it back too.
    let restored =
        knative_ha_webhook::engine::restore::restore("knative-serving", &patched).unwrap();
    let r = apply_rfc6902(
        &patched,
        &serde_json::to_value(&restored.mutation.patch).unwrap(),
    )
    .unwrap();
    assert!(
        r["spec"]["template"]["spec"]
            .get("priorityClassName")
            .is_none()
    );
}

#[test]
fn anti_affinity_keeps_node_affinity_and_pod_affinity() {
    let mut policy = example_policy();
    policy.spec.pod_anti_affinity = Some(knative_ha_webhook::policy::PodAntiAffinity {
        kind: knative_ha_webhook::policy::AntiAffinityType::Required,
        topology_key: Some("topology.kubernetes.io/zone".into()),
    });
    let mut d = fixture("Deployment", "knative-serving", "autoscaler");
    let node_affinity = json!({"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["system"]}]}]}});
    let pod_affinity = json!({"preferredDuringSchedulingIgnoredDuringExecution": []});
    d["spec"]["template"]["spec"]["affinity"]["nodeAffinity"] = node_affinity.clone();
    d["spec"]["template"]["spec"]["affinity"]["podAffinity"] = pod_affinity.clone();
    let (patch, _) = run(&policy, "knative-serving", &d);
    let patched = apply_rfc6902(&d, &patch).unwrap();
    let affinity = &patched["spec"]["template"]["spec"]["affinity"];
    assert_eq!(affinity["nodeAffinity"], node_affinity);
    assert_eq!(affinity["podAffinity"], pod_affinity);
    assert_eq!(
        affinity["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"],
        "topology.kubernetes.io/zone"
    );
}
