//! What the reconciler writes, and when, against the fake API server
//! (harness: reconcile_env): a first pass at once after a (re)start, one
//! Event per write carrying that write's changes, `config-leader-election`
//! before any Deployment, and a deleted policy that changes nothing unless
//! `--undo-unclaimed` asks for the undo.

use crate::reconcile_env::*;
use crate::support;
use crate::support::cluster::reconcile_pass;
use crate::support::fakeapi::{FakeApi, Request};

use std::time::Duration;

use knative_ha_webhook::engine::Snapshot;
use knative_ha_webhook::reconcile::restore::restore_namespace;
use serde_json::{Value, json};
use support::wait_until;

/// Stops reconciler `i` (it gives the Lease up) and waits for its task.
async fn stop(env: &mut Env, i: usize) {
    let _ = env.reconcilers[i].stop.send(true);
    let task = env.reconcilers[i].task.take().expect("running");
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("reconciler stops")
        .expect("reconciler task");
}

/// After a webhook outage (writes admitted unmutated) the drift must
/// be repaired without waiting for `--reconcile-interval` (an hour here): a
/// reconciler that (re)starts makes its first, full pass at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_reconciler_repairs_drift_at_once() {
    let mut env = Env::start().await;
    let value = example_policy_value();
    let policy = policy_of(&value);
    let exp = expectations(&env.api, &env.serving_keys(), &policy);
    env.create_policy(value);
    env.wait_policy(&policy).await;
    // Started after the policy: nothing changes in the snapshot any more,
    // only the first full pass can write.
    let a = env.reconciler("pod-a", |_| {}).await;
    env.wait_converged(&exp).await;
    stop(&mut env, a).await;

    // While no reconciler runs, a write goes through unmutated.
    env.api
        .update("apps", "deployments", SERVING, "controller", |d| {
            d["spec"]["replicas"] = json!(1);
        });
    let b = env.reconciler("pod-b", |_| {}).await;
    env.wait_leader(b).await;
    let controller: Key = ("Deployment".into(), SERVING.into(), "controller".into());
    let api = env.api.clone();
    wait_until("controller repaired by the first pass", async || {
        (current(&api, &controller)["spec"]["replicas"] == 3).then_some(())
    })
    .await;
}

/// The reconciler's Events about `name` (kind `kind`), oldest first.
fn applied_events(api: &FakeApi, kind: &str, name: &str) -> Vec<Value> {
    let mut events: Vec<Value> = api
        .events_for(name)
        .into_iter()
        .filter(|e| e["reason"] == "HighAvailabilityApplied" && e["regarding"]["kind"] == kind)
        .collect();
    events.sort_by_key(|e| {
        e["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|rv| rv.parse::<u64>().ok())
    });
    events
}

/// Each write gets its own Event with its own changes: folded into the
/// first write's Event (its count going to 2, its message staying the first
/// write's), `kubectl describe` would show a change that was not the one
/// that rolled the pods.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_write_gets_its_own_event_with_its_own_changes() {
    let mut env = Env::start().await;
    env.governed_by_example().await;
    let value = example_policy_value();
    let api = env.api.clone();
    wait_until("the first write's Event", async || {
        (applied_events(&api, "Deployment", "controller").len() == 1).then_some(())
    })
    .await;

    let mut raised = value;
    raised["spec"]["replicas"] = json!(4);
    let policy4 = policy_of(&raised);
    let exp4 = expectations(&env.api, &env.serving_keys(), &policy4);
    env.api.update(
        "knativeha.dev",
        "highavailabilitypolicies",
        "",
        "serving",
        |p| p["spec"]["replicas"] = json!(4),
    );
    env.wait_policy(&policy4).await;
    env.wait_converged(&exp4).await;
    let controller: Key = ("Deployment".into(), SERVING.into(), "controller".into());
    assert_eq!(patches(&env.api, &controller), 2, "two writes");
    // The second write's Event: a new one, or (the defect) the first one
    // counted again.
    let events = wait_until("the second write's Event", async || {
        let events = applied_events(&api, "Deployment", "controller");
        let counted = events.iter().any(|e| e["series"]["count"] == 2);
        (events.len() >= 2 || counted).then_some(events)
    })
    .await;
    let notes: Vec<&str> = events
        .iter()
        .map(|e| e["note"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(events.len(), 2, "one Event per write: {notes:?}");
    assert!(
        notes[0].contains("spec.replicas unset -> 3"),
        "the first write's changes: {notes:?}"
    );
    assert!(
        notes[1].contains("spec.replicas 3 -> 4") && !notes[1].contains("unset -> 3"),
        "the second write's own changes: {notes:?}"
    );
    for e in &events {
        assert!(
            e.get("series").is_none_or(Value::is_null),
            "a write is one occurrence, not a series: {e}"
        );
    }
}

/// The paths of the PATCH requests to `namespace`'s governed objects, in order.
fn patch_order(requests: &[Request], namespace: &str) -> Vec<String> {
    let scope = format!("/namespaces/{namespace}/");
    requests
        .iter()
        .filter(|q| q.method == "PATCH" && q.path.contains(&scope) && !q.path.contains("/events"))
        .map(|q| q.path.clone())
        .collect()
}

/// Asserts that `config-leader-election` was written, and before every
/// Deployment written (pods a Deployment write starts read the new keys).
fn assert_configmap_first(paths: &[String], what: &str) {
    let cm = paths
        .iter()
        .position(|p| p.ends_with("/configmaps/config-leader-election"))
        .unwrap_or_else(|| panic!("{what}: config-leader-election not written: {paths:?}"));
    let first_deployment = paths
        .iter()
        .position(|p| p.contains("/deployments/"))
        .unwrap_or_else(|| panic!("{what}: no Deployment written: {paths:?}"));
    assert!(
        cm < first_deployment,
        "{what}: config-leader-election written at {cm}, after the Deployment at {first_deployment}: {paths:?}"
    );
}

/// A pass, and `restore`, write `config-leader-election` before any
/// Deployment: were the leader-elected Deployments written first, pods
/// started in between would read the old buckets and nothing would restart
/// them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_leader_election_is_written_before_any_deployment() {
    let api = FakeApi::start().await;
    load_control_plane(&api);
    let policy = policy_of(&example_policy_value());
    let report = reconcile_pass(&api, &Snapshot::from_policies([policy]), false).await;
    assert!(report.ok(), "{report:?}");
    let reconciled = api.requests().len();
    assert_configmap_first(&patch_order(&api.requests(), SERVING), "reconcile pass");

    let restored = restore_namespace(&api.client().await, SERVING, false)
        .await
        .expect("restore");
    assert!(!restored.failed(), "{restored:?}");
    let paths = patch_order(&api.requests()[reconciled..], SERVING);
    assert_configmap_first(&paths, "restore");
}

/// A deleted policy changes nothing by default: the objects keep the
/// policy's values and the engine's records (Kyverno and Gatekeeper never
/// undo on deletion either); `restore` is the one command that undoes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_policy_leaves_the_objects_as_they_are() {
    let mut env = Env::start().await;
    env.governed_by_example().await;
    let governed = env.serving_objects();
    let patched = env.api.requests().len();
    env.api
        .delete("knativeha.dev", "highavailabilitypolicies", "", "serving");
    let store = env.store.clone();
    wait_until("the namespace without policy", async || {
        store.load().unclaimed(SERVING).then_some(())
    })
    .await;
    let api = env.api.clone();
    let wrote = support::wait::becomes_true(Duration::from_millis(1500), async || {
        api.requests()[patched..]
            .iter()
            .any(|q| q.method == "PATCH")
    })
    .await;
    assert!(!wrote, "a write after the policy was deleted");
    for (k, was) in &governed {
        assert_eq!(&current(&env.api, k), was, "{k:?} changed");
    }
}

/// `--undo-unclaimed` (opt-in): the policy deleted, the leader makes one
/// restore pass over the namespace: every object is the release's again
/// (records gone), without a kubectl apply or `restore`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_undo_unclaimed_a_deleted_policy_is_undone_by_one_restore_pass() {
    let mut env = Env::start().await;
    let release = env.serving_objects();
    let r = env.reconciler("pod-a", |c| c.undo_unclaimed = true).await;
    env.wait_leader(r).await;
    let value = example_policy_value();
    let exp = expectations(&env.api, &env.serving_keys(), &policy_of(&value));
    env.create_policy(value.clone());
    env.wait_converged(&exp).await;
    let name = value["metadata"]["name"].as_str().unwrap();
    env.api
        .delete("knativeha.dev", "highavailabilitypolicies", "", name);
    let api = env.api.clone();
    wait_until("every object back to the release", async || {
        release
            .iter()
            .all(|(k, was)| {
                let now = current(&api, k);
                content(&now) == content(was)
                    && now["metadata"].get("annotations") == was["metadata"].get("annotations")
            })
            .then_some(())
    })
    .await;
}
