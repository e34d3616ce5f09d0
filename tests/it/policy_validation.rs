//! Every validation rule with a failing case: the error names the field path
//! and the bad value. Plus parsing entry points and multi-document files.

use crate::support;

use knative_ha_webhook::policy::{self, Policy, PolicyError};
use proptest::prelude::*;
use serde_json::{Value, json};

/// The example policy with two workload overrides (the cases below edit them).
fn base() -> Value {
    let text = std::fs::read_to_string(support::repo_path("examples/policy.yaml")).unwrap();
    let mut v: Value = serde_saphyr::from_str(&text).unwrap();
    v["spec"]["workloads"] = json!([
        {"name": "activator", "replicas": 5, "podAntiAffinity": {"type": "Preferred"}},
        {"name": "webhook", "podAntiAffinity": {"type": "Preferred", "topologyKey": "kubernetes.io/hostname"}}
    ]);
    assert!(Policy::from_json(&v).is_ok(), "base policy must be valid");
    v
}

fn errors_of(doc: &Value) -> Vec<(String, String)> {
    match Policy::from_json(doc) {
        Ok(_) => Vec::new(),
        Err(e) => e
            .flatten()
            .into_iter()
            .map(|e| match e {
                PolicyError::Invalid { path, message } => (path.to_string(), message),
                other => (String::new(), other.to_string()),
            })
            .collect(),
    }
}

type Edit = fn(&mut Value);

/// (rule, edit to the example policy, expected path, text the message must contain)
const CASES: &[(&str, Edit, &str, &str)] = &[
    (
        "unknown spec field (typo)",
        |v| v["spec"]["replcas"] = json!(3),
        "spec.replcas",
        "unknown field \"replcas\"",
    ),
    (
        "unknown top-level field",
        |v| v["extra"] = json!(1),
        "extra",
        "unknown field \"extra\"",
    ),
    (
        "unknown nested field",
        |v| v["spec"]["leaderElection"]["bucket"] = json!(2),
        "spec.leaderElection.bucket",
        "unknown field",
    ),
    (
        "unknown field in a workload",
        |v| v["spec"]["workloads"][0]["replica"] = json!(2),
        "spec.workloads[0].replica",
        "unknown field",
    ),
    (
        "wrong apiVersion",
        |v| v["apiVersion"] = json!("knativeha.dev/v1"),
        "apiVersion",
        "\"knativeha.dev/v1\"",
    ),
    (
        "wrong kind",
        |v| v["kind"] = json!("Policy"),
        "kind",
        "\"Policy\"",
    ),
    (
        "spec missing",
        |v| {
            v.as_object_mut().unwrap().remove("spec");
        },
        "spec",
        "required",
    ),
    (
        "targetNamespace missing",
        |v| {
            v["spec"].as_object_mut().unwrap().remove("targetNamespace");
        },
        "spec.targetNamespace",
        "required",
    ),
    (
        "metadata missing",
        |v| {
            v.as_object_mut().unwrap().remove("metadata");
        },
        "metadata.name",
        "required",
    ),
    (
        "metadata.name missing",
        |v| v["metadata"] = json!({}),
        "metadata.name",
        "required",
    ),
    (
        "replicas of the wrong type",
        |v| v["spec"]["replicas"] = json!("3"),
        "spec.replicas",
        "\"3\"",
    ),
    (
        "replicas below 1",
        |v| v["spec"]["replicas"] = json!(0),
        "spec.replicas",
        "got 0",
    ),
    (
        "replicas above 100",
        |v| v["spec"]["replicas"] = json!(101),
        "spec.replicas",
        "got 101",
    ),
    (
        "replicas beyond int32",
        |v| v["spec"]["replicas"] = json!(5_000_000_000i64),
        "spec.replicas",
        "5000000000",
    ),
    (
        "targetNamespace not a DNS label",
        |v| v["spec"]["targetNamespace"] = json!("Knative_Serving"),
        "spec.targetNamespace",
        "\"Knative_Serving\"",
    ),
    (
        "targetNamespace too long",
        |v| v["spec"]["targetNamespace"] = json!("a".repeat(64)),
        "spec.targetNamespace",
        "aaaa",
    ),
    (
        "targetNamespace empty",
        |v| v["spec"]["targetNamespace"] = json!(""),
        "spec.targetNamespace",
        "\"\"",
    ),
    (
        "buckets 0",
        |v| v["spec"]["leaderElection"]["buckets"] = json!(0),
        "spec.leaderElection.buckets",
        "got 0",
    ),
    (
        "buckets 11",
        |v| v["spec"]["leaderElection"]["buckets"] = json!(11),
        "spec.leaderElection.buckets",
        "got 11",
    ),
    (
        "enabled not a boolean",
        |v| v["spec"]["leaderElection"]["enabled"] = json!("no"),
        "spec.leaderElection.enabled",
        "\"no\"",
    ),
    (
        "leaseDuration without unit",
        |v| v["spec"]["leaderElection"]["leaseDuration"] = json!("60"),
        "spec.leaderElection.leaseDuration",
        "\"60\"",
    ),
    (
        "renewDeadline with a bad unit",
        |v| v["spec"]["leaderElection"]["renewDeadline"] = json!("40x"),
        "spec.leaderElection.renewDeadline",
        "\"40x\"",
    ),
    (
        "retryPeriod zero",
        |v| v["spec"]["leaderElection"]["retryPeriod"] = json!("0s"),
        "spec.leaderElection.retryPeriod",
        "\"0s\"",
    ),
    (
        "retryPeriod negative",
        |v| v["spec"]["leaderElection"]["retryPeriod"] = json!("-1s"),
        "spec.leaderElection.retryPeriod",
        "\"-1s\"",
    ),
    (
        "leaseDuration not above renewDeadline",
        |v| v["spec"]["leaderElection"]["leaseDuration"] = json!("40s"),
        "spec.leaderElection.leaseDuration",
        "leaseDuration \"40s\" must be greater than renewDeadline \"40s\"",
    ),
    (
        "renewDeadline not above retryPeriod",
        |v| v["spec"]["leaderElection"]["retryPeriod"] = json!("1m"),
        "spec.leaderElection.renewDeadline",
        "renewDeadline \"40s\" must be greater than retryPeriod \"1m\"",
    ),
    (
        "ordering against Knative defaults",
        |v| v["spec"]["leaderElection"] = json!({"leaseDuration": "30s"}),
        "spec.leaderElection.leaseDuration",
        "renewDeadline (default \"40s\")",
    ),
    (
        "enabled false with global replicas 3",
        |v| v["spec"]["leaderElection"] = json!({"enabled": false}),
        "spec.replicas",
        "got 3",
    ),
    (
        "enabled false with workload replicas 5",
        |v| {
            v["spec"]["leaderElection"] = json!({"enabled": false});
            v["spec"]["replicas"] = json!(1);
        },
        "spec.workloads[0].replicas",
        "got 5",
    ),
    (
        "enabled false with buckets 5",
        |v| {
            v["spec"]["leaderElection"] = json!({"enabled": false, "buckets": 5});
            v["spec"]["replicas"] = json!(1);
            v["spec"]["workloads"] = json!([]);
        },
        "spec.leaderElection.buckets",
        "got 5",
    ),
    (
        "anti-affinity type unknown",
        |v| v["spec"]["podAntiAffinity"]["type"] = json!("Sometimes"),
        "spec.podAntiAffinity.type",
        "\"Sometimes\"",
    ),
    (
        "anti-affinity type missing",
        |v| v["spec"]["podAntiAffinity"] = json!({"topologyKey": "x"}),
        "spec.podAntiAffinity.type",
        "required",
    ),
    (
        "topologyKey empty",
        |v| v["spec"]["podAntiAffinity"]["topologyKey"] = json!(""),
        "spec.podAntiAffinity.topologyKey",
        "\"\"",
    ),
    (
        "workload topologyKey with spaces",
        |v| v["spec"]["workloads"][0]["podAntiAffinity"]["topologyKey"] = json!("a b"),
        "spec.workloads[0].podAntiAffinity.topologyKey",
        "\"a b\"",
    ),
    (
        "PDB with both fields",
        |v| v["spec"]["podDisruptionBudget"] = json!({"minAvailable": 1, "maxUnavailable": 1}),
        "spec.podDisruptionBudget",
        "got both",
    ),
    (
        "PDB with neither field",
        |v| v["spec"]["podDisruptionBudget"] = json!({}),
        "spec.podDisruptionBudget",
        "got neither",
    ),
    (
        "PDB negative int",
        |v| v["spec"]["podDisruptionBudget"] = json!({"maxUnavailable": -1}),
        "spec.podDisruptionBudget.maxUnavailable",
        "got -1",
    ),
    (
        "PDB percentage over 100",
        |v| v["spec"]["podDisruptionBudget"] = json!({"minAvailable": "120%"}),
        "spec.podDisruptionBudget.minAvailable",
        "\"120%\"",
    ),
    (
        "PDB string without percent",
        |v| v["spec"]["podDisruptionBudget"] = json!({"minAvailable": "two"}),
        "spec.podDisruptionBudget.minAvailable",
        "\"two\"",
    ),
    (
        "PDB of the wrong type",
        |v| v["spec"]["podDisruptionBudget"] = json!({"minAvailable": true}),
        "spec.podDisruptionBudget.minAvailable",
        "true",
    ),
    (
        "workload name duplicated",
        |v| v["spec"]["workloads"][1]["name"] = json!("activator"),
        "spec.workloads[1].name",
        "duplicate workload \"activator\"",
    ),
    (
        "workload name also excluded",
        |v| {
            v["spec"]["exclude"] = json!(["autoscaler-hpa"]);
            v["spec"]["workloads"][1]["name"] = json!("autoscaler-hpa");
        },
        "spec.workloads[1].name",
        "\"autoscaler-hpa\" is also listed in spec.exclude",
    ),
    (
        "workload name not a Deployment name",
        |v| v["spec"]["workloads"][0]["name"] = json!("Activator!"),
        "spec.workloads[0].name",
        "\"Activator!\"",
    ),
    (
        "workload name missing",
        |v| v["spec"]["workloads"][0] = json!({"replicas": 2}),
        "spec.workloads[0].name",
        "required",
    ),
    (
        "workload replicas 0",
        |v| v["spec"]["workloads"][0]["replicas"] = json!(0),
        "spec.workloads[0].replicas",
        "got 0",
    ),
    (
        "workload replicas 101",
        |v| v["spec"]["workloads"][0]["replicas"] = json!(101),
        "spec.workloads[0].replicas",
        "got 101",
    ),
    (
        "exclude entry not a name",
        |v| v["spec"]["exclude"] = json!(["Bad Name"]),
        "spec.exclude[0]",
        "\"Bad Name\"",
    ),
    (
        "exclude not a list",
        |v| v["spec"]["exclude"] = json!("autoscaler-hpa"),
        "spec.exclude",
        "\"autoscaler-hpa\"",
    ),
    (
        "workloads not a list",
        |v| v["spec"]["workloads"] = json!({"name": "x"}),
        "spec.workloads",
        "{\"name\":\"x\"}",
    ),
];

#[test]
fn the_example_policy_is_valid() {
    let policy = Policy::from_json(&base()).expect("example policy valid");
    assert_eq!(policy.name, "serving");
    assert_eq!(policy.spec.target_namespace, "knative-serving");
    for rel in [
        "examples/policies/ha-disabled.yaml",
        "examples/policies/kourier-system.yaml",
    ] {
        support::load_policy(rel);
    }
}

#[test]
fn every_rule_rejects_its_failing_case_naming_path_and_value() {
    for (rule, edit, path, needle) in CASES {
        let mut doc = base();
        edit(&mut doc);
        let errors = errors_of(&doc);
        assert!(
            errors.iter().any(|(p, m)| p == path && m.contains(needle)),
            "{rule}: expected an error at {path} containing {needle:?}, got {errors:?}"
        );
        // Display carries both too (what `check` prints).
        let shown = Policy::from_json(&doc).unwrap_err().to_string();
        assert!(
            shown.contains(path) && shown.contains(needle),
            "{rule}: {shown}"
        );
    }
}

#[test]
fn all_errors_are_collected_not_just_the_first() {
    let mut doc = base();
    doc["spec"]["replicas"] = json!(0);
    doc["spec"]["leaderElection"]["buckets"] = json!(11);
    doc["spec"]["workloads"][0]["replicas"] = json!(101);
    let paths: Vec<String> = errors_of(&doc).into_iter().map(|(p, _)| p).collect();
    for want in [
        "spec.replicas",
        "spec.leaderElection.buckets",
        "spec.workloads[0].replicas",
    ] {
        assert!(
            paths.iter().any(|p| p == want),
            "{want} missing from {paths:?}"
        );
    }
    let mut doc = base();
    doc["spec"]["replcas"] = json!(3);
    doc["spec"]["exclud"] = json!([]);
    assert_eq!(errors_of(&doc).len(), 2);
}

/// The server's policy readers (the file source, the cluster source) and
/// `check` / `/validate` report the same errors: a typo does not hide an
/// out-of-range value in another field.
#[test]
fn a_typo_does_not_hide_a_bad_value_and_every_reader_says_the_same() {
    let mut doc = base();
    doc["spec"]["replcas"] = json!(3);
    doc["spec"]["workloads"][0]["replicas"] = json!(101);
    let paths: Vec<String> = errors_of(&doc).into_iter().map(|(p, _)| p).collect();
    assert_eq!(paths, ["spec.replcas", "spec.workloads[0].replicas"]);
    let checked: Vec<String> = policy::prune::check_all(&doc)
        .unwrap_err()
        .iter()
        .map(ToString::to_string)
        .collect();
    let read: Vec<String> = Policy::from_json(&doc)
        .unwrap_err()
        .flatten()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(read, checked);
}

#[test]
fn raw_api_server_objects_are_accepted() {
    let mut doc = base();
    doc["metadata"] = json!({
        "name": "serving", "uid": "0b8f", "resourceVersion": "12", "generation": 3,
        "creationTimestamp": "2026-01-01T00:00:00Z",
        "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:spec": {}}}]
    });
    doc["status"] = json!({"observedGeneration": 3, "conditions": [{"type": "Ready", "status": "True",
        "reason": "Valid", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
    assert!(Policy::from_json(&doc).is_ok());
}

#[test]
fn from_yaml_reports_yaml_errors() {
    assert!(matches!(
        Policy::from_yaml("spec: [unclosed"),
        Err(PolicyError::Parse(_))
    ));
    let err = Policy::from_yaml("- a list").unwrap_err().to_string();
    assert!(err.contains("(document)") && err.contains("array"), "{err}");
}

#[test]
fn parse_policies_reads_multi_document_files_and_names_the_bad_document() {
    let a = std::fs::read_to_string(support::repo_path("examples/policy.yaml")).unwrap();
    let b = std::fs::read_to_string(support::repo_path("examples/policies/kourier-system.yaml"))
        .unwrap();
    let both = format!("{a}---\n# comment only\n---\n{b}");
    let policies = policy::parse_policies(&both).unwrap();
    let names: Vec<&str> = policies.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["serving", "kourier-gateway"]);

    let bad = format!("{a}---\n---\n{}", b.replace("replicas: 3", "replicas: 0"));
    let err = policy::parse_policies(&bad).unwrap_err();
    let flat = err.flatten();
    assert_eq!(flat.len(), 1, "{flat:?}");
    let shown = flat[0].to_string();
    assert!(
        shown.starts_with("document 3: spec.replicas") && shown.contains("got 0"),
        "{shown}"
    );

    let dup = format!("{a}---\n{a}");
    let shown = policy::parse_policies(&dup).unwrap_err().to_string();
    assert!(
        shown.contains("document 2") && shown.contains("knative-serving"),
        "{shown}"
    );

    assert!(policy::parse_policies("# nothing\n").is_err());
}

/// A policy file the server loads (`serve --policy-file`, `preview
/// --policy`) and `check` are read the same way: a document that is not
/// YAML is named with its line in the file, in the same words.
#[test]
fn a_policy_files_yaml_error_is_named_alike_by_the_server_and_check() {
    let a = std::fs::read_to_string(support::repo_path("examples/policy.yaml")).unwrap();
    let text = format!("{a}---\nspec: [unclosed\n");
    let line = a.lines().count() + 2;
    let loaded = policy::parse_policies(&text).unwrap_err().to_string();
    assert!(
        loaded.starts_with("document 2: invalid YAML: ")
            && loaded.contains(&format!("line {line}")),
        "{loaded}"
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.yaml");
    std::fs::write(&file, &text).unwrap();
    let checked = knative_ha_webhook::tools::check::check_files(std::slice::from_ref(&file));
    let want = format!("{}: {loaded}", file.display());
    assert!(
        checked
            .iter()
            .any(|l| matches!(l, knative_ha_webhook::tools::check::Line::Error(e) if *e == want)),
        "{want:?} not in {checked:?}"
    );
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        "[a-zA-Z0-9%./-]{0,8}".prop_map(Value::from),
        prop::sample::select(vec![
            "spec",
            "replicas",
            "knative-serving",
            "60s",
            "Required",
            "50%"
        ])
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            prop::collection::btree_map(
                prop::sample::select(vec![
                    "apiVersion",
                    "kind",
                    "metadata",
                    "name",
                    "spec",
                    "targetNamespace",
                    "replicas",
                    "leaderElection",
                    "enabled",
                    "buckets",
                    "leaseDuration",
                    "podAntiAffinity",
                    "type",
                    "topologyKey",
                    "podDisruptionBudget",
                    "minAvailable",
                    "maxUnavailable",
                    "workloads",
                    "exclude",
                    "status",
                    "x",
                ])
                .prop_map(String::from),
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// Garbage in: an error out, never a panic.
    #[test]
    fn from_json_never_panics(spec in arb_json(), name in prop::option::of("[a-z]{0,5}")) {
        let mut doc = json!({"apiVersion": "knativeha.dev/v1alpha1", "kind": "HighAvailabilityPolicy", "spec": spec});
        if let Some(n) = name { doc["metadata"] = json!({"name": n}); }
        // every error names a field path (no pathless serde messages)
        if let Err(e) = Policy::from_json(&doc) {
            for err in e.flatten() {
                prop_assert!(matches!(err, PolicyError::Invalid { .. }), "pathless error {err}");
            }
        }
        let _ = Policy::from_json(&doc["spec"]);
    }
}
