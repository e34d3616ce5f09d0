//! Against the fake API server: a HighAvailabilityPolicy
//! made invalid (here the renewDeadline 11s / retryPeriod 10s edit) keeps
//! its last valid spec in force, and so does a restarted webhook: the
//! source records the last valid spec in `status.lastValidSpec` and reads
//! it back. Status and metrics say the policy runs on its last valid
//! version.

use crate::support;
use crate::support::cluster as cluster_harness;
use crate::support::fakeapi;

use std::sync::Arc;

use cluster_harness::{GROUP, HAPS, Harness, OWN_NS, policy_configmap, policy_yaml};
use fakeapi::FakeApi;
use knative_ha_webhook::engine::{Input, Operation};
use serde_json::{Value, json};
use support::wait_until;

const SERVING: &str = "knative-serving";

/// An edit client-go refuses: renew 11s <= 1.2 x retry 10s.
fn break_timing(o: &mut Value) {
    o["spec"]["leaderElection"] = json!({"renewDeadline": "11s", "retryPeriod": "10s"});
}

impl Harness {
    /// Waits until the `Ready` condition of `serving` has `reason`, for
    /// the object's current generation; returns the object.
    async fn wait_reason(&self, reason: &str) -> Value {
        wait_until(&format!("serving Ready reason {reason}"), async || {
            let obj = self.api.get(GROUP, HAPS, "", "serving")?;
            let ready = obj["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Ready")?;
            let current = ready["reason"] == reason
                && ready["observedGeneration"] == obj["metadata"]["generation"];
            current.then_some(obj)
        })
        .await
    }

    /// Waits until the record says generation `generation` was valid.
    async fn wait_record(&self, generation: i64) -> Value {
        wait_until(&format!("lastValidGeneration {generation}"), async || {
            let obj = self.api.get(GROUP, HAPS, "", "serving")?;
            (obj["status"]["lastValidGeneration"] == generation).then_some(obj)
        })
        .await
    }

    /// `spec.replicas` of the real controller Deployment after the engine's
    /// patch (`None`: no policy governs knative-serving).
    fn controller_replicas(&self) -> Option<Value> {
        let controller = support::corpus::controller_deployment();
        let mutation = crate::support::mutate_in(
            &self.store.load(),
            &Input {
                operation: Operation::Create,
                namespace: SERVING,
                object: &controller,
            },
        )
        .expect("engine accepts the controller Deployment")?;
        let mut obj = controller.clone();
        json_patch::patch(&mut obj, &mutation.patch).expect("the patch applies");
        Some(obj["spec"]["replicas"].clone())
    }
}

fn ready_message(obj: &Value) -> String {
    obj["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn a_valid_generation_is_recorded_in_status() {
    let h = Harness::synced(FakeApi::start().await).await;
    h.api
        .create(GROUP, HAPS, cluster_harness::hap("serving", SERVING, 4));
    h.wait_reason("Valid").await;
    let obj = h.wait_record(1).await;
    assert_eq!(
        obj["status"]["lastValidSpec"],
        json!({"targetNamespace": SERVING, "replicas": 4})
    );
    // A later valid edit replaces the record whole (replicas removed).
    h.api.update(GROUP, HAPS, "", "serving", |o| {
        o["spec"] = json!({"targetNamespace": SERVING, "leaderElection": {"buckets": 3}});
    });
    let obj = h.wait_record(2).await;
    assert_eq!(
        obj["status"]["lastValidSpec"],
        json!({"targetNamespace": SERVING, "leaderElection": {"buckets": 3}})
    );
}

#[tokio::test]
async fn an_invalid_edit_survives_a_restart_on_the_last_valid_spec() {
    let api = Arc::new(FakeApi::start().await);
    let first = Harness::synced(api.clone()).await;
    first
        .api
        .create(GROUP, HAPS, cluster_harness::hap("serving", SERVING, 4));
    first.wait_reason("Valid").await;
    first.wait_record(1).await;
    first.api.update(GROUP, HAPS, "", "serving", break_timing);
    let obj = first.wait_reason("Invalid").await;
    let message = ready_message(&obj);
    assert!(message.contains("renewDeadline"), "{message}");
    assert!(
        message.ends_with("(the last valid version, generation 1, stays in force)"),
        "{message}"
    );
    assert_eq!(first.controller_replicas(), Some(json!(4)));
    first
        .wait_metric(r#"knative_ha_webhook_policies_on_last_valid{source="policies"} 1"#)
        .await;
    assert_eq!(obj["status"]["lastValidGeneration"], 1, "the record stays");
    drop(first);

    // A restarted webhook (rollout, drain, OOM) still governs the namespace.
    let second = Harness::synced(api).await;
    assert_eq!(
        second.controller_replicas(),
        Some(json!(4)),
        "the last valid spec is in force after the restart"
    );
    let obj = second.wait_reason("Invalid").await;
    assert!(
        ready_message(&obj).ends_with("(the last valid version, generation 1, stays in force)"),
        "{obj}"
    );
    second
        .wait_metric(r#"knative_ha_webhook_policies_on_last_valid{source="policies"} 1"#)
        .await;

    // Fixed: the fix applies, the record moves on, the gauge drops.
    second.api.update(GROUP, HAPS, "", "serving", |o| {
        o["spec"]["replicas"] = json!(5);
        o["spec"]["leaderElection"]["renewDeadline"] = json!("15s");
    });
    second.wait_reason("Valid").await;
    second.wait_record(3).await;
    assert_eq!(second.controller_replicas(), Some(json!(5)));
    second
        .wait_metric(r#"knative_ha_webhook_policies_on_last_valid{source="policies"} 0"#)
        .await;
}

#[tokio::test]
async fn an_invalid_policy_without_a_record_governs_nothing_after_a_restart() {
    // Created invalid while no webhook ran: nothing valid ever recorded.
    let api = FakeApi::start().await;
    let mut bad = cluster_harness::hap("serving", SERVING, 4);
    break_timing(&mut bad);
    api.create(GROUP, HAPS, bad);
    let h = Harness::synced(api).await;
    let obj = h.wait_reason("Invalid").await;
    assert!(obj["status"].get("lastValidSpec").is_none(), "{obj}");
    assert!(!ready_message(&obj).contains("stays in force"), "{obj}");
    assert_eq!(h.controller_replicas(), None);
}

const ANNOTATION: &str = "knativeha.dev/last-valid-policy";

#[tokio::test]
async fn a_policy_configmap_made_invalid_survives_a_restart_on_its_annotation() {
    let api = Arc::new(FakeApi::start().await);
    let first = Harness::synced(api.clone()).await;
    first.api.create(
        "",
        "configmaps",
        policy_configmap("ha", &policy_yaml("serving", SERVING, 4)),
    );
    let recorded = wait_until("the last-valid annotation", async || {
        let cm = first.api.get("", "configmaps", OWN_NS, "ha")?;
        cm["metadata"]["annotations"][ANNOTATION]
            .as_str()
            .map(str::to_string)
    })
    .await;
    assert_eq!(
        serde_json::from_str::<Value>(&recorded).unwrap(),
        json!({"name": "serving", "spec": {"targetNamespace": SERVING, "replicas": 4}})
    );
    first.api.update("", "configmaps", OWN_NS, "ha", |o| {
        o["data"]["policy.yaml"] = json!("spec: [unclosed");
    });
    first
        .wait_metric(r#"knative_ha_webhook_policies_on_last_valid{source="configmaps"} 1"#)
        .await;
    assert_eq!(first.controller_replicas(), Some(json!(4)));
    drop(first);

    let second = Harness::synced(api).await;
    assert_eq!(
        second.controller_replicas(),
        Some(json!(4)),
        "the recorded version is in force after the restart"
    );
    second
        .wait_metric(r#"knative_ha_webhook_policies_on_last_valid{source="configmaps"} 1"#)
        .await;
    let cm = second.api.get("", "configmaps", OWN_NS, "ha").unwrap();
    assert_eq!(cm["metadata"]["annotations"][ANNOTATION], recorded.as_str());
}

/// What an earlier release recorded and applied, with a budget this
/// release refuses (minAvailable 100% blocks every drain; a release
/// without that rule accepted the budget).
fn recorded_before_a_stricter_release() -> Value {
    json!({
        "lastValidGeneration": 1,
        "lastValidSpec": {"targetNamespace": SERVING, "replicas": 4,
                          "podDisruptionBudget": {"minAvailable": "100%"}},
    })
}

#[tokio::test]
async fn a_record_this_release_refuses_keeps_governing_without_the_refused_setting() {
    // The spec made invalid while no webhook ran; the record is from an
    // earlier, laxer release.
    let api = FakeApi::start().await;
    let mut bad = cluster_harness::hap("serving", SERVING, 4);
    break_timing(&mut bad);
    api.create(GROUP, HAPS, bad);
    api.update_status(
        GROUP,
        HAPS,
        "",
        "serving",
        recorded_before_a_stricter_release(),
    );
    let h = Harness::synced(api).await;
    assert_eq!(
        h.controller_replicas(),
        Some(json!(4)),
        "a restart on a stricter release ungoverned the namespace"
    );
    let obj = h.wait_reason("LastValidRefusedByThisRelease").await;
    let message = ready_message(&obj);
    for part in [
        "renewDeadline",
        "spec.podDisruptionBudget.minAvailable: \"100%\" allows no voluntary disruption",
        "stays in force without spec.podDisruptionBudget",
        "fix the policy",
    ] {
        assert!(message.contains(part), "{part:?} not in {message}");
    }
    assert_eq!(
        obj["status"]["lastValidSpec"],
        recorded_before_a_stricter_release()["lastValidSpec"],
        "the record stays as the earlier release wrote it"
    );
    h.wait_metric(r#"knative_ha_webhook_policies_on_refused_last_valid{source="policies"} 1"#)
        .await;
    h.wait_metric(r#"knative_ha_webhook_policies_on_last_valid{source="policies"} 1"#)
        .await;

    // Fixed: the fix applies, the record moves on, the gauge drops.
    h.api.update(GROUP, HAPS, "", "serving", |o| {
        o["spec"]["leaderElection"]["renewDeadline"] = json!("15s");
    });
    h.wait_reason("Valid").await;
    h.wait_metric(r#"knative_ha_webhook_policies_on_refused_last_valid{source="policies"} 0"#)
        .await;
}

#[tokio::test]
async fn a_record_that_does_not_parse_governs_nothing_and_status_says_so() {
    let api = FakeApi::start().await;
    let mut bad = cluster_harness::hap("serving", SERVING, 4);
    break_timing(&mut bad);
    api.create(GROUP, HAPS, bad);
    let mut record = recorded_before_a_stricter_release();
    record["lastValidSpec"]["replicaz"] = json!(4);
    api.update_status(GROUP, HAPS, "", "serving", record);
    let h = Harness::synced(api).await;
    let obj = h.wait_reason("Invalid").await;
    let message = ready_message(&obj);
    assert!(
        message.contains("cannot be read back by this release, so it is not applied"),
        "{message}"
    );
    assert_eq!(h.controller_replicas(), None);
}

#[tokio::test]
async fn a_configmap_record_this_release_refuses_keeps_governing() {
    let api = FakeApi::start().await;
    let mut cm = policy_configmap("ha", &policy_yaml("serving", SERVING, 4));
    cm["data"]["policy.yaml"] = json!("spec: [unclosed");
    let record = json!({"name": "serving", "spec":
        recorded_before_a_stricter_release()["lastValidSpec"]});
    cm["metadata"]["annotations"] = json!({ANNOTATION: record.to_string()});
    api.create("", "configmaps", cm);
    let h = Harness::synced(api).await;
    assert_eq!(
        h.controller_replicas(),
        Some(json!(4)),
        "a restart on a stricter release ungoverned the namespace"
    );
    h.wait_metric(r#"knative_ha_webhook_policies_on_refused_last_valid{source="configmaps"} 1"#)
        .await;
    let cm = h.api.get("", "configmaps", OWN_NS, "ha").unwrap();
    assert_eq!(
        cm["metadata"]["annotations"][ANNOTATION],
        record.to_string(),
        "the record stays as the earlier release wrote it"
    );
}
