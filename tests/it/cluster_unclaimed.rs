//! The cluster source and the namespaces no policy object
//! names at all (`Snapshot::unclaimed`). By default a deleted policy changes
//! nothing there (`restore` undoes); with `--undo-unclaimed`, `/mutate`
//! undoes the engine's records. A policy object that exists but is not in
//! force (invalid, never valid, or one whose target cannot be read) never
//! leaves its namespace unclaimed: undoing there would lower HA behind a typo.

use crate::support;
use crate::support::cluster as cluster_harness;
use crate::support::fakeapi;
use crate::support::router;

use cluster_harness::{GROUP, HAPS, Harness, OWN_NS, hap_with_spec as hap};
use fakeapi::FakeApi;
use knative_ha_webhook::admission::{OnError, ReviewOptions};
use router::Mutate;
use serde_json::{Value, json};
use support::wait_until;

const SERVING: &str = "knative-serving";
const EVENTING: &str = "knative-eventing";

async fn wait_unclaimed(h: &Harness, namespace: &str) {
    let store = h.store.clone();
    wait_until(&format!("{namespace} unclaimed"), async || {
        store.load().unclaimed(namespace).then_some(())
    })
    .await;
}

/// activator-pdb as the release's `kubectl apply` sends it after the
/// engine governed it: both budgets, and the engine's records.
fn reapplied_pdb() -> Value {
    let mut pdb = support::fixture("PodDisruptionBudget", SERVING, "activator-pdb");
    pdb["metadata"]["annotations"] = json!({
        "knativeha.dev/original-budget": "{\"minAvailable\":\"80%\"}",
        "knativeha.dev/written-budget": "{\"maxUnavailable\":1}",
    });
    pdb["spec"]["maxUnavailable"] = json!(1);
    pdb
}

/// `--undo-unclaimed`.
const UNDO: ReviewOptions = ReviewOptions {
    on_error: OnError::Allow,
    undo_unclaimed: true,
};

/// `/mutate` over the source's store for an UPDATE of `object` under
/// `options`: the `response`.
async fn mutate(h: &Harness, object: &Value, options: ReviewOptions) -> Value {
    let review = support::corpus::review("u-1", "UPDATE", SERVING, object);
    let (status, mut body) = Mutate::new(h.store.clone(), options).post(&review).await;
    assert_eq!(status, 200);
    body["response"].take()
}

#[tokio::test]
async fn an_invalid_policy_object_claims_its_namespace_until_it_is_deleted() {
    let api = FakeApi::start().await;
    let bad = hap(
        "broken",
        json!({"targetNamespace": SERVING, "podAntiAffinity": {"type": "Sometimes"}}),
    );
    api.create(GROUP, HAPS, bad);
    let h = Harness::synced(api).await;
    let snapshot = h.store.load();
    assert!(
        snapshot.policy_for(SERVING).is_none(),
        "never valid: not in force"
    );
    assert!(!snapshot.unclaimed(SERVING), "but it exists");
    assert!(snapshot.unclaimed(EVENTING), "it claims its target only");
    let response = mutate(&h, &reapplied_pdb(), UNDO).await;
    assert!(response.get("patch").is_none(), "{response}");

    h.api.delete(GROUP, HAPS, "", "broken");
    wait_unclaimed(&h, SERVING).await;
    let response = mutate(&h, &reapplied_pdb(), UNDO).await;
    assert!(
        response["patch"].is_string(),
        "the records undone: {response}"
    );
}

#[tokio::test]
async fn a_deleted_policy_leaves_its_namespace_unclaimed() {
    let h = Harness::synced(FakeApi::start().await).await;
    h.api.create(
        GROUP,
        HAPS,
        hap(
            "serving",
            json!({"targetNamespace": SERVING, "replicas": 3}),
        ),
    );
    let store = h.store.clone();
    wait_until("the policy in force", async || {
        store.load().policy_for(SERVING).map(|_| ())
    })
    .await;
    assert!(!h.store.load().unclaimed(SERVING));
    h.api.delete(GROUP, HAPS, "", "serving");
    wait_unclaimed(&h, SERVING).await;
}

/// By default (no `--undo-unclaimed`) a deleted policy changes nothing: the
/// release's next write of an object carrying the engine's records (and the
/// policy's values) is admitted as it is, an empty patch, no warning.
#[tokio::test]
async fn by_default_a_deleted_policy_leaves_the_objects_as_they_are() {
    let h = Harness::synced(FakeApi::start().await).await;
    h.api.create(
        GROUP,
        HAPS,
        hap(
            "serving",
            json!({"targetNamespace": SERVING, "podDisruptionBudget": {"maxUnavailable": 1}}),
        ),
    );
    let store = h.store.clone();
    wait_until("the policy in force", async || {
        store.load().policy_for(SERVING).map(|_| ())
    })
    .await;
    h.api.delete(GROUP, HAPS, "", "serving");
    wait_unclaimed(&h, SERVING).await;
    let response = mutate(&h, &reapplied_pdb(), ReviewOptions::default()).await;
    assert_eq!(response["allowed"], true, "{response}");
    assert!(
        response.get("patch").is_none(),
        "records undone without --undo-unclaimed: {response}"
    );
    assert!(response.get("warnings").is_none(), "{response}");
    let response = mutate(&h, &reapplied_pdb(), UNDO).await;
    assert!(
        response["patch"].is_string(),
        "with --undo-unclaimed the records are undone: {response}"
    );
}

#[tokio::test]
async fn a_policy_configmap_whose_target_cannot_be_read_leaves_nothing_unclaimed() {
    let api = FakeApi::start().await;
    api.create(
        "",
        "configmaps",
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "ha", "namespace": OWN_NS,
                         "labels": {"knativeha.dev/policy": "true"}},
            "data": {"policy.yaml": "spec: [unclosed"},
        }),
    );
    let h = Harness::synced(api).await;
    let snapshot = h.store.load();
    assert!(!snapshot.unclaimed(SERVING) && !snapshot.unclaimed(EVENTING));
}
