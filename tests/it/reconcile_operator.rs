//! Knative installed by the Knative Operator: every object carries an
//! ownerReference to the KnativeServing. The recommended policy governs
//! them, and the policy's status tells the truth either way: a policy that
//! leaves every target alone is `Ready=False NothingGoverned` (naming them
//! in `status.leftAlone`, counted by a gauge), and the KnativeServing's
//! fields the policy overrides are named in `status.operatorOverrides` and
//! in an Event on the KnativeServing.
//!
//! Every wait is bounded (`wait_until`); nothing asserts on elapsed time.

use crate::reconcile_env::*;
use crate::support;
use crate::support::fakeapi::ResourceDef;

use knative_ha_webhook::reconcile::metrics::{LeftAloneLabels, RunLabel};
use knative_ha_webhook::sources::cluster::verdict::NOTHING_GOVERNED;
use serde_json::{Value, json};
use support::wait_until;

const GROUP: &str = "knativeha.dev";
const HAPS: &str = "highavailabilitypolicies";

/// Every object of the control plane in knative-serving, owned by the
/// KnativeServing as the Operator creates them.
fn operator_owned(env: &Env) {
    for key in env.serving_keys() {
        let (group, plural) = support::corpus::group_plural(&key.0);
        env.api.update(group, plural, &key.1, &key.2, |o| {
            o["metadata"]["ownerReferences"] = json!([{
                "apiVersion": "operator.knative.dev/v1beta1", "kind": "KnativeServing",
                "name": "knative-serving", "uid": "ks-uid", "controller": true,
                "blockOwnerDeletion": true}]);
        });
    }
}

/// The policy `serving` once `ready` holds of it.
async fn wait_status(env: &Env, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
    wait_until(what, async || {
        let obj = env.api.get(GROUP, HAPS, "", "serving")?;
        ready(&obj).then_some(obj)
    })
    .await
}

fn ready_reason(obj: &Value) -> Option<&str> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")?["reason"]
        .as_str()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_that_leaves_every_operator_owned_object_alone_says_so() {
    let mut env = Env::start().await;
    operator_owned(&env);
    let r = env.reconciling().await;
    let mut value = example_policy_value();
    value["spec"]["governOperatorOwned"] = json!(false);
    env.create_policy(value);
    let obj = wait_status(&env, "Ready=False NothingGoverned", |o| {
        ready_reason(o) == Some(NOTHING_GOVERNED)
    })
    .await;
    let status = &obj["status"];
    let left = status["leftAlone"].as_array().unwrap();
    assert_eq!(
        Some(left.len() as u64),
        status["governedObjects"].as_u64(),
        "{status}"
    );
    assert!(
        left.len() >= 10,
        "every object of knative-serving: {status}"
    );
    assert!(
        left.iter().all(|l| l["reason"]
            .as_str()
            .unwrap()
            .starts_with("owned by the Knative Operator's KnativeServing/knative-serving")),
        "{status}"
    );
    let gauge = env.reconcilers[r]
        .metrics
        .left_alone
        .get_or_create(&LeftAloneLabels {
            target_namespace: SERVING.into(),
            reason: "operator-owned",
        })
        .get();
    assert_eq!(gauge, left.len() as i64);
    // Nothing was written to the Operator's objects.
    for key in env.serving_keys() {
        assert_eq!(patches(&env.api, &key), 0, "{key:?}");
    }

    // The recommended policy (governOperatorOwned unset): in force, nothing
    // left alone, and the objects are brought in line.
    env.api.update(GROUP, HAPS, "", "serving", |o| {
        o["spec"]
            .as_object_mut()
            .unwrap()
            .remove("governOperatorOwned");
    });
    let obj = wait_status(&env, "Ready=True, nothing left alone", |o| {
        ready_reason(o) == Some("Valid") && o["status"]["leftAlone"] == json!([])
    })
    .await;
    assert_eq!(
        obj["status"]["governedObjects"].as_u64(),
        Some(left.len() as u64)
    );
    let controller = wait_until("controller at 3 replicas", async || {
        let d = env.api.get("apps", "deployments", SERVING, "controller")?;
        (d["spec"]["replicas"] == 3).then_some(d)
    })
    .await;
    assert_eq!(
        controller["metadata"]["ownerReferences"][0]["kind"],
        "KnativeServing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_fields_the_policy_overrides_are_named_in_status_and_an_event() {
    let mut env = Env::start().await;
    env.api.register(ResourceDef::new(
        "operator.knative.dev",
        "v1beta1",
        "knativeservings",
        "KnativeServing",
        true,
        true,
    ));
    env.api.create(
        "operator.knative.dev",
        "knativeservings",
        json!({"apiVersion": "operator.knative.dev/v1beta1", "kind": "KnativeServing",
               "metadata": {"name": "knative-serving", "namespace": SERVING},
               "spec": {"high-availability": {"replicas": 2},
                        "workloads": [{"name": "activator", "replicas": 4}]}}),
    );
    operator_owned(&env);
    // No pass but the first ones: no full pass, no pass that settles.
    let r = env
        .reconciler("pod-a", |c| {
            c.interval = std::time::Duration::from_secs(3600);
            c.settle = std::time::Duration::from_secs(3600);
        })
        .await;
    env.wait_leader(r).await;
    env.create_policy(example_policy_value());
    let obj = wait_status(&env, "status.operatorOverrides", |o| {
        o["status"]["operatorOverrides"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
    })
    .await;
    let overrides: Vec<&str> = obj["status"]["operatorOverrides"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        overrides,
        [
            "KnativeServing/knative-serving spec.high-availability.replicas: 2; the policy's replicas 3 wins",
            "KnativeServing/knative-serving spec.workloads[activator].replicas: 4; the policy's replicas 5 wins",
        ]
    );
    assert_eq!(ready_reason(&obj), Some("Valid"));
    let event = wait_until("the OverriddenByPolicy Event", async || {
        env.api
            .events_for("knative-serving")
            .into_iter()
            .find(|e| e["reason"] == "OverriddenByPolicy")
    })
    .await;
    let note = event["note"].as_str().unwrap();
    assert!(
        note.contains("spec.high-availability.replicas: 2; the policy's replicas 3 wins"),
        "{note}"
    );
    assert_eq!(event["regarding"]["kind"], "KnativeServing");
    assert_eq!(event["metadata"]["namespace"], SERVING);

    // The passes done (the first, the policy's, the one for the
    // config-leader-election it wrote): no run for 20 polls. Then the
    // KnativeServing edited to the policy's replicas: no pass is due (no
    // policy, HPA or config-leader-election change), yet the status follows.
    let m = env.reconcilers[r].metrics.clone();
    let runs = || m.runs.get_or_create(&RunLabel { result: "success" }).get();
    let (mut last, mut quiet) = (runs(), 0);
    wait_until("the reconciler idle", async || {
        let now = runs();
        quiet = if now == last { quiet + 1 } else { 0 };
        last = now;
        (quiet >= 20).then_some(())
    })
    .await;
    env.api.update(
        "operator.knative.dev",
        "knativeservings",
        SERVING,
        "knative-serving",
        |ks| ks["spec"]["high-availability"]["replicas"] = json!(3),
    );
    wait_status(&env, "one override left", |o| {
        o["status"]["operatorOverrides"].as_array().map(Vec::len) == Some(1)
    })
    .await;
}
