//! The engine's changes as data: what the real Knative v1.23.0 objects get,
//! read from each change's fields (object, field, before, after, reason,
//! cause), not from its line.

use crate::support;
use support::corpus::GOVERNED;

use knative_ha_webhook::engine::{
    self, Cause, Change, FieldChange, Input, Operation, Reason, What,
};
use knative_ha_webhook::policy::Policy;
use serde_json::Value;

/// The engine's changes of `object` (UPDATE in [`GOVERNED`], the
/// manifests' HPAs known).
fn changes(policy: &Policy, object: &Value) -> Vec<Change> {
    let input = Input {
        operation: Operation::Update,
        namespace: GOVERNED,
        object,
    };
    engine::outcome(
        engine::Answering::Governed(&support::corpus::governing(policy)),
        &input,
    )
    .expect("engine")
    .mutation
    .changes
}

/// The one change whose first field is `field`.
fn of_field<'c>(changes: &'c [Change], field: &str) -> &'c Change {
    changes
        .iter()
        .find(|c| c.what.fields().first().is_some_and(|f| f.field == field))
        .unwrap_or_else(|| panic!("no change of {field}: {changes:?}"))
}

#[test]
fn a_deployment_gets_its_fields_with_before_after_and_why() {
    let p = support::serving_policy("  replicas: 3\n  podAntiAffinity: {type: Required}\n");
    let controller = support::fixture("Deployment", GOVERNED, "controller");
    let changes = changes(&p, &controller);
    assert!(
        changes.iter().all(
            |c| (c.kind, c.name.as_str()) == ("deployment", "controller")
                && c.cause == Cause::Policy("p".into())
        ),
        "{changes:?}"
    );

    let replicas = of_field(&changes, "spec.replicas");
    assert_eq!(
        replicas.what.fields(),
        [FieldChange::new("spec.replicas", "unset", "3")]
    );
    assert_eq!(replicas.reason, None);

    let rollout = of_field(&changes, "spec.strategy.rollingUpdate.maxUnavailable");
    let [f] = rollout.what.fields() else {
        panic!("one field: {rollout:?}")
    };
    assert_eq!(
        (f.before.as_deref(), f.after.as_str()),
        (Some("unset (25%)"), "1")
    );
    assert!(
        matches!(&rollout.reason, Some(Reason::Noted(why)) if why.starts_with("Required anti-affinity with 3 replicas:")),
        "{rollout:?}"
    );

    assert!(changes.iter().any(|c| c.what
        == What::AntiAffinitySet {
            strength: "Required",
            downgraded: None,
            topology_key: "kubernetes.io/hostname".into(),
        }));
    let warnings: Vec<&Change> = changes.iter().filter(|c| c.is_warning()).collect();
    assert!(
        matches!(warnings[..], [w] if matches!(&w.what, What::Warning(text) if text.starts_with("Required anti-affinity on kubernetes.io/hostname"))),
        "{warnings:?}"
    );
}

#[test]
fn an_hpa_line_holds_both_fields_and_their_shared_reason() {
    let p = support::serving_policy("  replicas: 3\n");
    let hpa = support::fixture("HorizontalPodAutoscaler", GOVERNED, "activator");
    let changes = changes(&p, &hpa);
    let [c] = &changes[..] else {
        panic!("one change: {changes:?}")
    };
    assert_eq!(
        c.what,
        What::Fields(vec![
            FieldChange::new("spec.minReplicas", "1", "3"),
            FieldChange::new("spec.maxReplicas", "20", "22"),
        ])
    );
    assert_eq!(
        c.reason,
        Some(Reason::Noted("from the original 1/20".into()))
    );
}

#[test]
fn restore_gives_the_release_values_back_as_fields() {
    let p = support::serving_policy("  replicas: 3\n  podDisruptionBudget: {maxUnavailable: 1}\n");
    let pdb = support::fixture("PodDisruptionBudget", GOVERNED, "activator-pdb");
    let changed = support::mutated(&p, &pdb);
    let written = of_field(&changes(&p, &pdb), "spec.minAvailable")
        .what
        .clone();
    assert_eq!(
        written,
        What::field("spec.minAvailable", "\"80%\"", "\"66%\""),
        "the policy's budget in the field the release sets"
    );
    let restored = engine::restore::restore(GOVERNED, &changed)
        .expect("restore")
        .mutation
        .changes;
    let [c] = &restored[..] else {
        panic!("one change: {restored:?}")
    };
    assert_eq!(c.cause, Cause::Restored);
    assert_eq!(
        c.what,
        What::field("spec.minAvailable", "\"66%\"", "\"80%\"")
    );
}
