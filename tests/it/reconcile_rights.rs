//! A governed namespace that refuses the reconciler (403 Forbidden, as
//! RBAC answers once the chart's Role there is gone): the policy's `Ready`
//! condition says so (reason `ReconcilerForbidden`, naming the namespace,
//! the verb, the resource and the fix), the gauge
//! `knative_ha_webhook_reconcile_forbidden{target_namespace}` is 1, and both go
//! back by themselves once a pass goes through. A policy ConfigMap gets
//! the same as an Event.
//!
//! Every wait is bounded (`wait_until`); nothing asserts on elapsed time.

use crate::reconcile_env::*;
use crate::support;
use crate::support::cluster::{policy_configmap, policy_yaml};

use knative_ha_webhook::reconcile::ReconcileMetrics;
use knative_ha_webhook::reconcile::metrics::NamespaceLabel;
use knative_ha_webhook::sources::cluster::verdict::RECONCILER_FORBIDDEN;
use serde_json::Value;
use support::wait_until;

const GROUP: &str = "knativeha.dev";
const HAPS: &str = "highavailabilitypolicies";

fn forbidden_gauge(m: &ReconcileMetrics) -> i64 {
    m.forbidden
        .get_or_create(&NamespaceLabel {
            target_namespace: SERVING.into(),
        })
        .get()
}

/// Waits until the Ready condition of the policy `serving` has this
/// status and reason; the condition.
async fn wait_ready(env: &Env, status: &str, reason: &str) -> Value {
    wait_until(&format!("serving Ready={status}/{reason}"), async || {
        let obj = env.api.get(GROUP, HAPS, "", "serving")?;
        let c = obj["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Ready")?
            .clone();
        (c["status"] == status && c["reason"] == reason).then_some(c)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_list_makes_the_policy_not_ready_until_a_pass_goes_through() {
    let mut env = Env::start().await;
    let r = env.reconciling().await;
    let value = example_policy_value();
    let exp = expectations(&env.api, &env.serving_keys(), &policy_of(&value));
    env.create_policy(value);
    env.wait_converged(&exp).await;
    wait_ready(&env, "True", "Valid").await;
    let m = env.reconcilers[r].metrics.clone();
    assert_eq!(forbidden_gauge(&m), 0);

    env.api.forbid(SERVING, &["list"]);
    let c = wait_ready(&env, "False", RECONCILER_FORBIDDEN).await;
    let message = c["message"].as_str().unwrap();
    // The first list refused (the switch may land while a pass is under way).
    for part in [
        "may not list ",
        " in namespace knative-serving (403 Forbidden)",
        "helm upgrade",
        "rbac.scope=cluster",
    ] {
        assert!(message.contains(part), "{part}: {message}");
    }
    assert_eq!(forbidden_gauge(&m), 1, "set before the verdict is reported");

    env.api.forbid(SERVING, &[]);
    wait_ready(&env, "True", "Valid").await;
    assert_eq!(forbidden_gauge(&m), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_patch_names_the_verb_and_the_resource() {
    let mut env = Env::start().await;
    let r = env.reconciling().await;
    env.api.forbid(SERVING, &["patch"]);
    let value = example_policy_value();
    let exp = expectations(&env.api, &env.serving_keys(), &policy_of(&value));
    env.create_policy(value);
    let c = wait_ready(&env, "False", RECONCILER_FORBIDDEN).await;
    let message = c["message"].as_str().unwrap();
    // config-leader-election is written first.
    assert!(
        message.contains("may not patch configmaps in namespace knative-serving"),
        "{message}"
    );
    assert_eq!(forbidden_gauge(&env.reconcilers[r].metrics), 1);

    env.api.forbid(SERVING, &[]);
    env.wait_converged(&exp).await;
    wait_ready(&env, "True", "Valid").await;
    assert_eq!(forbidden_gauge(&env.reconcilers[r].metrics), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_configmap_gets_a_warning_event_instead() {
    let mut env = Env::start().await;
    let r = env.reconciling().await;
    env.api.create(
        "",
        "configmaps",
        policy_configmap("ha-policy", &policy_yaml("from-cm", SERVING, 3)),
    );
    let event_with = |reason: &'static str| {
        let api = env.api.clone();
        async move || {
            api.events_for("ha-policy")
                .into_iter()
                .find(|e| e["reason"] == reason)
        }
    };
    wait_until("Valid event", event_with("Valid")).await;

    env.api.forbid(SERVING, &["list"]);
    let event = wait_until(
        "ReconcilerForbidden event",
        event_with(RECONCILER_FORBIDDEN),
    )
    .await;
    assert_eq!(event["type"], "Warning");
    let note = event["note"].as_str().unwrap();
    assert!(note.contains("may not list "), "{note}");
    assert_eq!(forbidden_gauge(&env.reconcilers[r].metrics), 1);

    env.api.forbid(SERVING, &[]);
    let refused_at = event["eventTime"].as_str().unwrap().to_string();
    wait_until("a Valid event after it", async || {
        env.api
            .events_for("ha-policy")
            .into_iter()
            .find(|e| e["reason"] == "Valid" && e["eventTime"].as_str() > Some(refused_at.as_str()))
    })
    .await;
    assert_eq!(forbidden_gauge(&env.reconcilers[r].metrics), 0);
}
