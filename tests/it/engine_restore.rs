//! What the engine replaced is recorded on the object and
//! put back, by a later policy that no longer asks for it and by
//! `engine::restore::restore` (the `restore` command), on the real Knative
//! v1.23.0 objects. The patches are applied with the independent RFC 6902
//! applier.

use crate::support;

use knative_ha_webhook::engine::{self, Input, Operation, restore};
use knative_ha_webhook::policy::Policy;
use serde_json::Value;
use support::apply_rfc6902;
use support::corpus::{GOVERNED, governed_objects};

use support::{differences, mutated, serving_policy as policy};

/// Required zone anti-affinity, zone spread, a maxUnavailable PDB, leader
/// election: everything the engine writes.
fn required_zone() -> Policy {
    policy(
        "  replicas: 3\n  podAntiAffinity: {type: Required, topologyKey: topology.kubernetes.io/zone}\n  topologySpreadConstraints: [{topologyKey: topology.kubernetes.io/zone, maxSkew: 1, whenUnsatisfiable: DoNotSchedule}]\n  podDisruptionBudget: {maxUnavailable: 1}\n  leaderElection: {enabled: true, buckets: 3, leaseDuration: 30s, renewDeadline: 20s, retryPeriod: 5s}\n",
    )
}

fn policies() -> Vec<(&'static str, Policy)> {
    vec![
        (
            "examples/policy.yaml",
            support::load_policy("examples/policy.yaml"),
        ),
        ("required zone", required_zone()),
        (
            "examples/policies/ha-disabled.yaml",
            support::load_policy("examples/policies/ha-disabled.yaml"),
        ),
        (
            "workload PDB",
            policy(
                "  workloads: [{name: activator, replicas: 4, podDisruptionBudget: {minAvailable: 2}}]\n",
            ),
        ),
    ]
}

/// The object after `restore`'s patch, and its change lines.
fn restored(object: &Value) -> (Value, Vec<String>) {
    let o = restore::restore(GOVERNED, object).expect("restore succeeds");
    let patch = serde_json::to_value(&o.mutation.patch).unwrap();
    let out = apply_rfc6902(object, &patch).expect("the restore patch applies");
    if let Some(obj) = &o.object {
        assert_eq!(obj, &out, "the outcome's object is the patched one");
    }
    (out, o.mutation.lines())
}

#[test]
fn mutate_then_restore_gives_back_the_release_objects() {
    for (name, p) in policies() {
        for (label, release) in governed_objects() {
            let after = mutated(&p, &release);
            let (back, changes) = restored(&after);
            assert!(
                back == release,
                "{name}: {label}: restore gives back the release object: {:#?} (changes {changes:#?})",
                differences(&back, &release)
            );
            if after != release {
                assert!(
                    !changes.is_empty(),
                    "{name}: {label}: restore says what it does"
                );
            }
            let again = restore::restore(GOVERNED, &back).unwrap();
            assert!(again.mutation.is_empty(), "{name}: {label}: restore twice");
        }
    }
}

#[test]
fn a_sequence_of_policies_then_restore_gives_back_the_release_objects() {
    let all = policies();
    for (first, p) in &all {
        for (second, q) in &all {
            for (label, release) in governed_objects() {
                let after = mutated(q, &mutated(p, &release));
                let (back, _) = restored(&after);
                assert!(
                    back == release,
                    "{first} then {second}: {label}: {:#?}",
                    differences(&back, &release)
                );
            }
        }
    }
}

fn object(label: &str) -> Value {
    governed_objects()
        .into_iter()
        .find(|(l, _)| l == label)
        .unwrap_or_else(|| panic!("no {label}"))
        .1
}

fn has_records(object: &Value) -> bool {
    object["metadata"]["annotations"]
        .as_object()
        .is_some_and(|a| a.keys().any(|k| k.starts_with("knativeha.dev/original-")))
}

#[test]
fn a_later_policy_without_the_setting_puts_the_release_value_back() {
    // Required zone, then `podAntiAffinity: None`: maxUnavailable 1 was the
    // engine's, the release's 0 comes back.
    let none = policy("  podAntiAffinity: {type: None}\n");
    let autoscaler = object("deployment/autoscaler");
    let first = mutated(&required_zone(), &autoscaler);
    assert_eq!(
        first["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
        1
    );
    let second = mutated(&none, &first);
    assert_eq!(
        second["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], 0,
        "the release's maxUnavailable 0 is back"
    );
    assert!(
        second["spec"]["template"]["spec"]
            .get("topologySpreadConstraints")
            .is_none(),
        "the release has no spread constraints"
    );
    assert_eq!(
        second["spec"]["template"]["spec"]["affinity"],
        autoscaler["spec"]["template"]["spec"]["affinity"]
    );
    // Replicas: the policy no longer sets them, the release's 1 is back.
    assert_eq!(second["spec"]["replicas"], 1);
    assert!(
        mutated(&none, &second) == second,
        "the undo is done once: the next admission changes nothing"
    );

    let pdb = object("poddisruptionbudget/activator-pdb");
    let first = mutated(&required_zone(), &pdb);
    // maxUnavailable 1 from 3 activators up, in the field the release
    // sets: a percentage, as the HPA scales.
    assert_eq!(first["spec"]["minAvailable"], "66%");
    assert!(first["spec"].get("maxUnavailable").is_none());
    let second = mutated(&none, &first);
    assert_eq!(
        second["spec"], pdb["spec"],
        "minAvailable 80% back, maxUnavailable gone"
    );
    assert!(
        !has_records(&second),
        "the records are dropped with the undo"
    );
}

#[test]
fn a_policy_that_keeps_the_setting_keeps_the_first_record() {
    // Two policies in a row that both set the PDB: the record is the
    // release's value, not the first policy's.
    let pdb = object("poddisruptionbudget/webhook-pdb");
    let a = mutated(
        &policy("  podDisruptionBudget: {maxUnavailable: 1}\n"),
        &pdb,
    );
    // (replicas 3: a minAvailable of 2 must leave a disruption at what runs.)
    let b = mutated(
        &policy("  replicas: 3\n  podDisruptionBudget: {minAvailable: 2}\n"),
        &a,
    );
    assert_eq!(b["spec"]["minAvailable"], 2);
    let (back, _) = restored(&b);
    assert_eq!(back["spec"], pdb["spec"]);
}

#[test]
fn restore_leaves_an_object_the_engine_never_changed_alone() {
    for (label, release) in governed_objects() {
        let o = restore::restore(GOVERNED, &release).unwrap();
        assert!(o.mutation.is_empty(), "{label}: {:?}", o.mutation.changes);
    }
}

#[test]
fn a_malformed_record_is_an_error_naming_the_annotation() {
    let mut pdb = object("poddisruptionbudget/activator-pdb");
    pdb["metadata"]["annotations"] = serde_json::json!({"knativeha.dev/original-budget": "80%"});
    let err = restore::restore(GOVERNED, &pdb).unwrap_err().to_string();
    assert!(
        err.contains("activator-pdb") && err.contains("knativeha.dev/original-budget"),
        "{err}"
    );
}

#[test]
fn the_records_are_the_release_values_json_text() {
    // tests/it/engine_fixtures.rs sets the records aside; here they are exact.
    let pdb = object("poddisruptionbudget/webhook-pdb");
    let input = Input {
        operation: Operation::Create,
        namespace: GOVERNED,
        object: &pdb,
    };
    let example = support::load_policy("examples/policy.yaml");
    let m = engine::outcome(
        engine::Answering::Governed(&engine::Snapshot::from_policies([Policy::clone(&example)])),
        &input,
    )
    .map(|o| o.mutation)
    .unwrap();
    assert_eq!(
        serde_json::to_value(&m.patch).unwrap(),
        // One record of the budget it replaced, one of what it wrote (engine::pdb).
        serde_json::json!([
            {"op": "replace", "path": "/spec/minAvailable", "value": "66%"},
            {"op": "add", "path": "/metadata/annotations",
             "value": {"knativeha.dev/original-budget": "{\"minAvailable\":\"80%\"}"}},
            {"op": "add", "path": "/metadata/annotations/knativeha.dev~1written-budget",
             "value": "{\"minAvailable\":\"66%\"}"},
        ])
    );
    let autoscaler = mutated(&required_zone(), &object("deployment/autoscaler"));
    let annotations = &autoscaler["metadata"]["annotations"];
    assert_eq!(annotations["knativeha.dev/original-replicas"], "1");
    assert_eq!(
        annotations["knativeha.dev/original-rollout-max-unavailable"],
        "0"
    );
    assert_eq!(
        annotations["knativeha.dev/original-topology-spread-constraints"],
        "null"
    );
    let cm = mutated(
        &required_zone(),
        &object("configmap/config-leader-election"),
    );
    assert_eq!(
        cm["metadata"]["annotations"]["knativeha.dev/original-data-buckets"],
        "null"
    );
    assert_eq!(
        cm["metadata"]["annotations"]["knative.dev/example-checksum"],
        object("configmap/config-leader-election")["metadata"]["annotations"]["knative.dev/example-checksum"]
    );
}

#[test]
fn an_unrecorded_pdb_falls_back_on_kubectls_last_applied_configuration() {
    // As an earlier webhook (no records) left activator-pdb after a
    // client-side `kubectl apply` of the release.
    let release = object("poddisruptionbudget/activator-pdb");
    let mut old = release.clone();
    old["spec"].as_object_mut().unwrap().remove("minAvailable");
    old["spec"]["maxUnavailable"] = serde_json::json!(1);
    let o = restore::restore(GOVERNED, &old).unwrap();
    assert!(o.mutation.is_empty(), "nothing says what the release had");

    old["metadata"]["annotations"] = serde_json::json!({
        "kubectl.kubernetes.io/last-applied-configuration": release.to_string(),
    });
    let (back, changes) = restored(&old);
    assert_eq!(back["spec"], release["spec"], "{changes:?}");
    assert!(
        changes
            .iter()
            .any(|c| c.contains("last-applied-configuration")),
        "{changes:?}"
    );
    let again = restore::restore(GOVERNED, &back).unwrap();
    assert!(again.mutation.is_empty());
}

mod sequences {
    //! Over random sequences of policies: restore gives back the release,
    //! and a last policy without the settings undoes what they wrote.

    use super::*;
    use proptest::prelude::*;
    use support::policygen::{self, AntiAffinity, Budgets, LeaderElection, Shape, Spread};

    /// The settings whose records `restore` puts back, with
    /// leader-election durations and a priority class.
    const SHAPE: Shape = Shape {
        namespaces: &[GOVERNED],
        replicas: Some(1..=4),
        leader_election: Some(LeaderElection {
            buckets: 2..=2,
            durations: &[
                policygen::NO_DURATIONS,
                (None, None, Some("5s")),
                (Some("30s"), Some("20s"), None),
                (Some("30s"), Some("20s"), Some("5s")),
            ],
        }),
        anti_affinity: Some(AntiAffinity {
            keys: &[policygen::ZONE],
        }),
        spread: Some(Spread {
            keys: &[policygen::ZONE],
            max_skew: 1..=1,
        }),
        budgets: Some(Budgets {
            ints: 1..=1,
            percents: None,
            per_workload: false,
        }),
        priority_classes: &["knative-control-plane"],
        workloads: policygen::NO_WORKLOADS,
        operator_owned: false,
    };

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        #[test]
        fn restore_after_any_sequence_gives_back_the_release(
            seq in prop::collection::vec(policygen::arb_policy(&SHAPE), 1..=3)
        ) {
            for (label, release) in governed_objects() {
                let after = seq.iter().fold(release.clone(), |o, p| mutated(p, &o));
                let (back, _) = restored(&after);
                prop_assert!(back == release, "{}: {:#?}", label, differences(&back, &release));
            }
        }

        #[test]
        fn a_last_policy_without_the_settings_undoes_them(
            seq in prop::collection::vec(policygen::arb_policy(&SHAPE), 1..=3)
        ) {
            let bare = policy("");
            for (label, release) in governed_objects() {
                let after = seq.iter().fold(release.clone(), |o, p| mutated(p, &o));
                let last = mutated(&bare, &after);
                match release["kind"].as_str() {
                    Some("PodDisruptionBudget") => {
                        prop_assert_eq!(&last["spec"], &release["spec"], "{}", label);
                    }
                    Some("Deployment") => {
                        for pointer in [
                            "/spec/replicas",
                            "/spec/strategy/rollingUpdate/maxUnavailable",
                            "/spec/template/spec/topologySpreadConstraints",
                            // Leader election: the settings hash, --disable-ha.
                            "/spec/template/metadata/annotations",
                            "/spec/template/spec/containers",
                        ] {
                            prop_assert_eq!(
                                last.pointer(pointer), release.pointer(pointer), "{} {}", label, pointer
                            );
                        }
                    }
                    Some("ConfigMap") => {
                        prop_assert!(last == release, "{}: {:#?}", label, differences(&last, &release));
                    }
                    _ => {}
                }
                if matches!(release["kind"].as_str(), Some("ConfigMap" | "Deployment")) {
                    prop_assert!(!has_records(&last), "{}: records left: {}", label, last["metadata"]);
                }
            }
        }

        /// Per key: a last policy with leaderElection but none of its keys
        /// puts every recorded key of config-leader-election back.
        #[test]
        fn a_last_leader_election_without_the_keys_undoes_them(
            seq in prop::collection::vec(policygen::arb_policy(&SHAPE), 1..=3)
        ) {
            let keyless = policy("  leaderElection: {enabled: true}\n");
            let release = object("configmap/config-leader-election");
            let after = seq.iter().fold(release.clone(), |o, p| mutated(p, &o));
            let last = mutated(&keyless, &after);
            prop_assert!(last == release, "{:#?}", differences(&last, &release));
        }
    }
}
