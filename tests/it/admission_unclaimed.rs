//! Where no policy object exists at all ([`Snapshot::unclaimed`]): by
//! default nothing is undone (a deleted policy changes nothing; `restore`
//! undoes); with `--undo-unclaimed` the engine's records are undone at
//! admission.

use crate::admission_review::{Reply, review, review_json};
use base64::Engine as _;
use knative_ha_webhook::admission::{OnError, ReviewOptions, ReviewOutcome};
use knative_ha_webhook::engine::Snapshot;
use serde_json::Value;

/// `--undo-unclaimed`.
const UNDO: ReviewOptions = ReviewOptions {
    on_error: OnError::Allow,
    undo_unclaimed: true,
};

/// activator-pdb as the release's next `kubectl apply` sends it after the
/// policy was deleted: the apply re-adds the release's `minAvailable`
/// beside the engine's `maxUnavailable` (the API server refuses both), and
/// the engine's records are still there.
fn reapplied_pdb() -> Value {
    serde_json::json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "activator-pdb", "namespace": "knative-serving",
            "annotations": {
                "knativeha.dev/original-budget": "{\"minAvailable\":\"80%\"}",
                "knativeha.dev/written-budget": "{\"maxUnavailable\":1}"}},
        "spec": {"minAvailable": "80%", "maxUnavailable": 1,
                 "selector": {"matchLabels": {"app": "activator"}}}
    })
}

fn patched(reply: &Reply, object: &Value) -> Option<Value> {
    let patch = reply.body["response"]["patch"].as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(patch)
        .unwrap();
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
    let mut out = object.clone();
    json_patch::patch(&mut out, &patch).unwrap();
    Some(out)
}

/// Synced, and no policy object at all (the policy was deleted).
fn no_policy_object() -> Snapshot {
    Snapshot::from_policies([])
}

/// A deleted policy changes nothing by default: an object carrying the
/// engine's records, in a namespace no policy object names, is admitted as
/// it is (empty patch, no warning), like any object no policy governs.
#[test]
fn by_default_no_policy_object_changes_nothing() {
    let pdb = reapplied_pdb();
    let reply = review(
        &no_policy_object(),
        &review_json("UPDATE", "knative-serving", pdb),
        &ReviewOptions::default(),
    );
    assert_eq!((reply.status, reply.outcome), (200, ReviewOutcome::Skipped));
    assert_eq!(reply.body["response"]["allowed"], true);
    assert!(
        reply.body["response"].get("patch").is_none(),
        "records undone without --undo-unclaimed: {}",
        reply.body
    );
    assert!(reply.body["response"].get("warnings").is_none());
}

/// `--undo-unclaimed`: with no policy object left for the
/// namespace, an object carrying the engine's records gets them undone at
/// admission, and the answer says why.
#[test]
fn with_undo_unclaimed_no_policy_object_undoes_the_records_of_an_object() {
    let mut pdb = reapplied_pdb();
    // What the engine does not change stays.
    pdb["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] =
        serde_json::json!("{}");
    let reply = review(
        &no_policy_object(),
        &review_json("UPDATE", "knative-serving", pdb.clone()),
        &UNDO,
    );
    assert_eq!(reply.outcome, ReviewOutcome::Patched);
    let after = patched(&reply, &pdb).expect("a patch");
    assert_eq!(
        after["spec"],
        serde_json::json!({"minAvailable": "80%", "selector": {"matchLabels": {"app": "activator"}}}),
        "the release's budget alone"
    );
    let annotations = after["metadata"]["annotations"].as_object().unwrap();
    assert!(
        !annotations.keys().any(|k| k.starts_with("knativeha.dev/")),
        "records removed: {after}"
    );
    assert_eq!(
        annotations["kubectl.kubernetes.io/last-applied-configuration"], "{}",
        "the other annotations are kept: {after}"
    );
    let warnings = reply.body["response"]["warnings"].as_array().unwrap();
    assert!(
        !warnings.is_empty()
            && warnings.iter().all(|w| w
                .as_str()
                .unwrap()
                .contains("no policy governs the namespace any more")),
        "{warnings:?}"
    );
}

#[test]
fn no_policy_object_leaves_an_object_without_records_alone() {
    let mut pdb = reapplied_pdb();
    pdb["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("annotations");
    // A number no `Value` can hold: only building the object would see it.
    pdb["spec"]["selector"]["x"] = serde_json::json!(0);
    let body = String::from_utf8(review_json("UPDATE", "knative-serving", pdb))
        .unwrap()
        .replace("\"x\":0", "\"x\":1e400");
    let reply = review(&no_policy_object(), body.as_bytes(), &UNDO);
    assert_eq!((reply.status, reply.outcome), (200, ReviewOutcome::Skipped));
    assert!(reply.body["response"].get("patch").is_none());
    assert!(reply.body["response"].get("warnings").is_none());
}

/// A policy object that exists but is not in force (invalid, in conflict,
/// outside --governed-namespaces), or sources not synced yet: never undone
/// (it would lower HA behind a typo or a restart).
#[test]
fn a_policy_object_not_in_force_or_no_sync_undoes_nothing() {
    let pdb = reapplied_pdb();
    let body = review_json("UPDATE", "knative-serving", pdb);
    let mut claimed = no_policy_object();
    claimed.unclaimed =
        knative_ha_webhook::engine::Unclaimed::all_but(["knative-serving".to_string()]);
    let mut unknown = no_policy_object();
    unknown.unclaimed = knative_ha_webhook::engine::Unclaimed::Unknown;
    let mut unsynced = no_policy_object();
    unsynced.synced = false;
    for (name, snapshot, outcome) in [
        ("claimed", claimed, ReviewOutcome::Skipped),
        ("unknown", unknown, ReviewOutcome::Skipped),
        ("not synced", unsynced, ReviewOutcome::NotSynced),
    ] {
        let reply = review(&snapshot, &body, &UNDO);
        assert_eq!(reply.outcome, outcome, "{name}");
        assert!(reply.body["response"].get("patch").is_none(), "{name}");
    }
}

/// The pod template's labels (beside the hash) survive the hash's
/// removal where no policy object exists: Deployment's selector needs them.
#[test]
fn no_policy_object_keeps_what_the_view_leaves_out_of_a_deployment() {
    let deployment = serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "controller", "namespace": "knative-serving",
            "annotations": {"knativeha.dev/original-replicas": "1"}},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "controller"}},
            "template": {
                "metadata": {"labels": {"app": "controller"},
                    "annotations": {"knativeha.dev/leader-election-hash": "a94b58b82d50d865"}},
                "spec": {"containers": [{"name": "controller", "image": "i"}]}}}
    });
    let reply = review(
        &no_policy_object(),
        &review_json("UPDATE", "knative-serving", deployment.clone()),
        &UNDO,
    );
    let after = patched(&reply, &deployment).expect("a patch");
    assert_eq!(after["spec"]["replicas"], 1, "{after}");
    assert_eq!(
        after["spec"]["template"]["metadata"]["labels"],
        serde_json::json!({"app": "controller"}),
        "{after}"
    );
    assert!(
        after["spec"]["template"]["metadata"]["annotations"]
            .get("knativeha.dev/leader-election-hash")
            .is_none(),
        "{after}"
    );
}
