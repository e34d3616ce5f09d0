//! The reconciler against the fake API server (testkit/src/fakeapi): real HTTP,
//! a real kube client, the real cluster policy source feeding the store,
//! and the real Knative v1.23.0 control plane loaded as existing objects
//! before any policy exists.
//!
//! Every wait is bounded (`wait_until`); nothing asserts on elapsed time.

use crate::reconcile_env::*;
use crate::support;
use crate::support::cluster::reconcile_pass;

use std::collections::{BTreeMap, BTreeSet};

use knative_ha_webhook::engine::Snapshot;
use serde_json::{Value, json};
use support::wait_until;

/// A policy appears: every object that needed it is written exactly once
/// and then equals what the engine computes; the others are not touched;
/// a second run writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_appears_each_drifting_object_is_written_once() {
    let mut env = Env::start().await;
    let r = env.reconciler("pod-a", |_| {}).await;
    env.wait_leader(r).await;

    let mut value = example_policy_value();
    // An excluded Deployment is never written.
    value["spec"]["exclude"] = json!(["autoscaler-hpa"]);
    let policy = policy_of(&value);
    let exp = expectations(&env.api, &env.serving_keys(), &policy);
    let needed = needing(&exp);
    for must in [
        ("Deployment", "controller"),
        ("Deployment", "autoscaler"),
        ("HorizontalPodAutoscaler", "activator"),
        ("HorizontalPodAutoscaler", "webhook"),
        ("PodDisruptionBudget", "webhook-pdb"),
        ("ConfigMap", "config-leader-election"),
    ] {
        assert!(
            needed.contains(&(must.0.to_string(), SERVING.to_string(), must.1.to_string())),
            "{must:?} should need the policy: {needed:?}"
        );
    }
    assert!(
        !needed.contains(&("Deployment".into(), SERVING.into(), "autoscaler-hpa".into())),
        "autoscaler-hpa is excluded"
    );

    env.create_policy(value);
    env.wait_converged(&exp).await;
    env.wait_runs(r, 1).await;

    let counts = env.patch_counts();
    for (k, n) in &counts {
        let want = usize::from(needed.contains(k));
        assert_eq!(*n, want, "PATCH requests for {k:?}");
    }
    // Every write names the reconciler as its field manager, so managedFields
    // tell its changes apart from the admission-time ones.
    let managers: BTreeSet<String> = env
        .api
        .requests()
        .iter()
        .filter(|q| q.method == "PATCH" && q.path.contains("/namespaces/knative-serving/"))
        .map(|q| q.query.clone())
        .collect();
    assert_eq!(
        managers,
        BTreeSet::from(["fieldManager=knative-ha-webhook-reconciler".to_string()]),
        "query strings of the reconciler's PATCH requests"
    );
    let m = &env.reconcilers[r].metrics;
    assert_eq!(
        writes(m, "Deployment", "success") as usize,
        needed.iter().filter(|k| k.0 == "Deployment").count()
    );
    assert_eq!(drift_gauge(m, "Deployment"), 0);
    // Every written object gets an Event saying what changed and why
    // (what `kubectl describe` shows for the rollout); the others none.
    for key in env.serving_keys() {
        let events: Vec<Value> = env
            .api
            .events_for(&key.2)
            .into_iter()
            .filter(|e| e["reason"] == "HighAvailabilityApplied" && e["regarding"]["kind"] == key.0)
            .collect();
        if needed.contains(&key) {
            assert_eq!(events.len(), 1, "{key:?}: {events:?}");
            let note = events[0]["note"].as_str().unwrap_or_default();
            assert!(note.contains("(policy serving)"), "{key:?}: {note}");
            assert_eq!(events[0]["action"], "Reconcile");
            assert_eq!(events[0]["type"], "Normal");
        } else {
            assert!(events.is_empty(), "{key:?} was not written: {events:?}");
        }
    }
    assert_eq!(
        env.api
            .get(
                "coordination.k8s.io",
                "leases",
                OWN_NS,
                "knative-ha-webhook-reconcile"
            )
            .expect("lease")["spec"]["holderIdentity"],
        "pod-a"
    );

    // A second run (the library function, on the same snapshot) finds
    // everything in line and writes nothing.
    let report = reconcile_pass(&env.api, &env.store.load(), false).await;
    assert!(report.ok(), "{report:?}");
    assert_eq!(report.written(), 0, "{report:?}");
    // The budgets the first run created for the controller, the autoscaler
    // and net-kourier-controller (autoscaler-hpa is excluded) are listed now.
    let created: Vec<String> = env
        .api
        .list("policy", "poddisruptionbudgets")
        .iter()
        .filter(|p| p["metadata"]["annotations"]["knativeha.dev/created-for"].is_string())
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        created,
        [
            "autoscaler-pdb",
            "controller-pdb",
            "net-kourier-controller-pdb"
        ]
    );
    assert_eq!(
        report.objects.len(),
        env.serving_keys().len() + created.len()
    );
    assert_eq!(env.patch_counts(), counts, "no PATCH in the second run");
}

/// Raising replicas 3 -> 4 rewrites exactly the objects it affects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_change_rewrites_exactly_the_affected_objects() {
    let mut env = Env::start().await;
    let (r, _) = env.governed_by_example().await;
    let value = example_policy_value();
    let before = env.patch_counts();

    let mut raised = value.clone();
    raised["spec"]["replicas"] = json!(4);
    let policy4 = policy_of(&raised);
    let exp4 = expectations(&env.api, &env.serving_keys(), &policy4);
    let affected = needing(&exp4);
    let names: BTreeSet<&str> = affected.iter().map(|k| k.2.as_str()).collect();
    assert!(
        names.contains("controller") && names.contains("autoscaler"),
        "{names:?}"
    );
    assert!(
        !names.contains("activator"),
        "activator has its own replicas: {names:?}"
    );

    env.api.update(
        "knativeha.dev",
        "highavailabilitypolicies",
        "",
        "serving",
        |p| {
            p["spec"]["replicas"] = json!(4);
        },
    );
    env.wait_policy(&policy4).await;
    env.wait_converged(&exp4).await;
    env.wait_runs(r, 2).await;
    let after = env.patch_counts();
    for k in &env.keys {
        let want = before[k] + usize::from(affected.contains(k));
        assert_eq!(after[k], want, "PATCH requests for {k:?}");
    }
}

/// A concurrent writer changes the object between the reconciler's read
/// and its write: the resourceVersion test fails, the reconciler reads the
/// object again and writes once more; the concurrent change is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writer_conflict_then_retry_keeps_their_change() {
    let mut env = Env::start().await;
    let r = env.reconciler("pod-a", |_| {}).await;
    env.wait_leader(r).await;
    env.api
        .interfere_next_patch("apps", "deployments", SERVING, "controller", |d| {
            d["spec"]["revisionHistoryLimit"] = json!(7);
            d["metadata"]["annotations"]["someone-else"] = json!("was here");
        });
    let value = example_policy_value();
    let exp = expectations(&env.api, &env.serving_keys(), &policy_of(&value));
    env.create_policy(value);
    let api = env.api.clone();
    let controller: Key = ("Deployment".into(), SERVING.into(), "controller".into());
    let c = controller.clone();
    let done = wait_until("controller written after the conflict", async || {
        let d = current(&api, &c);
        (d["spec"]["replicas"] == 3).then_some(d)
    })
    .await;
    assert_eq!(
        done["spec"]["revisionHistoryLimit"], 7,
        "concurrent change kept"
    );
    assert_eq!(done["metadata"]["annotations"]["someone-else"], "was here");
    let mut want = exp[&controller].clone().expect("controller drifts");
    want["spec"]["revisionHistoryLimit"] = json!(7);
    assert_eq!(content(&done), want);
    assert_eq!(
        patches(&env.api, &controller),
        2,
        "one failed test, one write"
    );
    let mut exp = exp;
    exp.insert(controller.clone(), Some(want));
    env.wait_converged(&exp).await;
    let m = &env.reconcilers[r].metrics;
    assert_eq!(writes(m, "Deployment", "conflict"), 1);
    assert_eq!(writes(m, "Deployment", "error"), 0);
}

/// Two replicas compete for the Lease: only the holder writes, each object
/// once; when the holder stops it releases the Lease and the other takes over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_compete_for_the_lease_only_one_writes() {
    let mut env = Env::start().await;
    let a = env.reconciler("pod-a", |_| {}).await;
    let b = env.reconciler("pod-b", |_| {}).await;
    let (ma, mb) = (
        env.reconcilers[a].metrics.clone(),
        env.reconcilers[b].metrics.clone(),
    );
    wait_until("one leader", async || {
        (ma.leader.get() + mb.leader.get() == 1).then_some(())
    })
    .await;
    let (leader, follower) = if ma.leader.get() == 1 { (a, b) } else { (b, a) };
    let holder = env
        .api
        .get(
            "coordination.k8s.io",
            "leases",
            OWN_NS,
            "knative-ha-webhook-reconcile",
        )
        .expect("lease")["spec"]["holderIdentity"]
        .clone();
    assert_eq!(holder, if leader == a { "pod-a" } else { "pod-b" });

    let value = example_policy_value();
    let exp = expectations(&env.api, &env.serving_keys(), &policy_of(&value));
    let needed = needing(&exp);
    env.create_policy(value);
    env.wait_converged(&exp).await;
    env.wait_runs(leader, 1).await;
    for (k, n) in env.patch_counts() {
        assert_eq!(
            n,
            usize::from(needed.contains(&k)),
            "PATCH requests for {k:?}"
        );
    }
    assert_eq!(
        total_writes(&env.reconcilers[follower].metrics),
        0,
        "the follower wrote"
    );
    assert_eq!(env.reconcilers[follower].metrics.leader.get(), 0);
    assert!(total_writes(&env.reconcilers[leader].metrics) as usize >= needed.len());

    // The leader stops: it releases the Lease; the follower takes over.
    let _ = env.reconcilers[leader].stop.send(true);
    let task = env.reconcilers[leader].task.take().unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(10), task)
        .await
        .expect("reconciler stops")
        .expect("reconciler task");
    env.wait_leader(follower).await;
    let new_holder = env
        .api
        .get(
            "coordination.k8s.io",
            "leases",
            OWN_NS,
            "knative-ha-webhook-reconcile",
        )
        .expect("lease")["spec"]["holderIdentity"]
        .clone();
    assert_eq!(new_holder, if follower == a { "pod-a" } else { "pod-b" });
}

/// Dry run: nothing is written; the drift shows in the metric.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_writes_nothing_and_reports_drift() {
    let mut env = Env::start().await;
    let r = env.reconciler("pod-a", |c| c.dry_run = true).await;
    env.wait_leader(r).await;
    let value = example_policy_value();
    let exp = expectations(&env.api, &env.serving_keys(), &policy_of(&value));
    let needed = needing(&exp);
    let before: BTreeMap<Key, Value> = env
        .keys
        .iter()
        .map(|k| (k.clone(), current(&env.api, k)))
        .collect();
    env.create_policy(value);
    env.wait_runs(r, 1).await;
    let m = &env.reconcilers[r].metrics;
    for kind in [
        "Deployment",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "ConfigMap",
    ] {
        // The 4 budgets to create count as PodDisruptionBudget drift.
        let created = if kind == "PodDisruptionBudget" { 4 } else { 0 };
        let n = needed.iter().filter(|k| k.0 == kind).count() as i64 + created;
        assert_eq!(drift_gauge(m, kind), n, "drift gauge for {kind}");
    }
    assert!(drift_gauge(m, "Deployment") > 0);
    assert_eq!(total_writes(m), 0);
    for key in env.serving_keys() {
        assert!(
            env.api.events_for(&key.2).is_empty(),
            "a dry run writes no Event on {key:?}"
        );
    }
    for (k, n) in env.patch_counts() {
        assert_eq!(n, 0, "PATCH requests for {k:?}");
        assert_eq!(current(&env.api, &k), before[&k], "{k:?} unchanged");
    }
}

/// `--reconcile-pod-templates=false`: replicas and the other kinds are
/// written, pod templates stay exactly as they were; objects whose only
/// drift is in the pod template are not written at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_templates_false_leaves_every_pod_template_alone() {
    let mut env = Env::start().await;
    let r = env.reconciler("pod-a", |c| c.pod_templates = false).await;
    env.wait_leader(r).await;
    let value = example_policy_value();
    let policy = policy_of(&value);
    let before: BTreeMap<Key, Value> = env
        .keys
        .iter()
        .map(|k| (k.clone(), current(&env.api, k)))
        .collect();
    let exp = expectations(&env.api, &env.serving_keys(), &policy);
    // Expected: the engine's result with the original pod template.
    let exp_no_template: BTreeMap<Key, Option<Value>> = exp
        .iter()
        .map(|(k, v)| {
            let v = v.clone().map(|mut v| {
                if k.0 == "Deployment" {
                    v["spec"]["template"] = before[k]["spec"]["template"].clone();
                }
                v
            });
            let unchanged = v.as_ref() == Some(&content(&before[k]));
            // config-leader-election is held back with the pod templates
            // (a restart to read it is a pod template change).
            let held = is_leader_election_cm(k);
            (k.clone(), if unchanged || held { None } else { v })
        })
        .collect();
    let template_only: Vec<&Key> = exp
        .iter()
        .filter(|(k, v)| v.is_some() && exp_no_template[*k].is_none())
        .map(|(k, _)| k)
        .collect();
    env.create_policy(value);
    env.wait_converged(&exp_no_template).await;
    env.wait_runs(r, 1).await;
    for k in env.serving_keys().iter().filter(|k| k.0 == "Deployment") {
        assert_eq!(
            current(&env.api, k)["spec"]["template"],
            before[k]["spec"]["template"],
            "pod template of {k:?} changed"
        );
    }
    for k in &template_only {
        assert_eq!(patches(&env.api, k), 0, "{k:?} has only pod template drift");
    }
    let controller: Key = ("Deployment".into(), SERVING.into(), "controller".into());
    assert_eq!(current(&env.api, &controller)["spec"]["replicas"], 3);
    assert_eq!(patches(&env.api, &controller), 1);
    // Pod template drift is left, and counted.
    assert!(drift_gauge(&env.reconcilers[r].metrics, "Deployment") > 0);
    let _ = KOURIER;
}

/// `--reconcile-pod-templates=false` with a policy whose replicas Knative
/// already has: the Deployments' only drift is pod anti-affinity, so they
/// get no PATCH at all, while the HPAs, PDBs and config-leader-election are
/// written; the left drift is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_templates_false_skips_deployments_with_only_pod_template_drift() {
    let mut env = Env::start().await;
    let r = env.reconciler("pod-a", |c| c.pod_templates = false).await;
    env.wait_leader(r).await;
    let mut value = example_policy_value();
    value["spec"]["replicas"] = json!(1);
    // Preferred: Required would also set maxUnavailable 1 (so a rollout can
    // stop a pod), drift outside the pod template.
    value["spec"]["podAntiAffinity"] =
        json!({"type": "Preferred", "topologyKey": "topology.kubernetes.io/zone"});
    let policy = policy_of(&value);
    let exp = expectations(&env.api, &env.serving_keys(), &policy);
    // Deployments whose only drift is in the pod template (with Required
    // anti-affinity, activator's maxUnavailable 0 -> 1 is other drift).
    let spec_without_template = |v: &Value| {
        let mut spec = v["spec"].clone();
        spec.as_object_mut().map(|m| m.remove("template"));
        spec
    };
    let template_only: BTreeSet<Key> = needing(&exp)
        .into_iter()
        .filter(|k| {
            k.0 == "Deployment"
                && spec_without_template(exp[k].as_ref().unwrap())
                    == spec_without_template(&current(&env.api, k))
        })
        .collect();
    let names: BTreeSet<&str> = template_only.iter().map(|k| k.2.as_str()).collect();
    assert!(
        names.contains("controller") && names.contains("autoscaler"),
        "{names:?}"
    );
    for k in &template_only {
        let want = exp[k].as_ref().unwrap();
        assert_eq!(
            want["spec"]["replicas"],
            current(&env.api, k)["spec"]["replicas"],
            "{k:?}: only template drift"
        );
    }
    let others: BTreeMap<Key, Option<Value>> = exp
        .iter()
        .filter(|(k, _)| !template_only.contains(*k))
        .map(|(k, v)| {
            let v = v.clone().map(|mut v| {
                if k.0 == "Deployment" {
                    v["spec"]["template"] = current(&env.api, k)["spec"]["template"].clone();
                }
                v
            });
            (k.clone(), if is_leader_election_cm(k) { None } else { v })
        })
        .collect();
    assert!(
        others.values().any(Option::is_some),
        "some non-Deployment drift"
    );
    // Held back: every pod-template drift, also of Deployments with other
    // drift (the HPA-scaled webhook's maxSurge).
    let template_drift = needing(&exp)
        .into_iter()
        .filter(|k| {
            k.0 == "Deployment"
                && exp[k].as_ref().unwrap()["spec"]["template"]
                    != current(&env.api, k)["spec"]["template"]
        })
        .count();
    assert!(template_drift > template_only.len(), "{template_drift}");

    env.create_policy(value);
    env.wait_converged(&others).await;
    env.wait_runs(r, 1).await;
    for k in &template_only {
        assert_eq!(patches(&env.api, k), 0, "{k:?}");
    }
    for (k, v) in &others {
        assert_eq!(patches(&env.api, k), usize::from(v.is_some()), "{k:?}");
    }
    assert_eq!(
        drift_gauge(&env.reconcilers[r].metrics, "Deployment"),
        template_drift as i64
    );
    assert_eq!(
        drift_gauge(&env.reconcilers[r].metrics, "HorizontalPodAutoscaler"),
        0
    );
}

/// The periodic full run: someone scales controller back down by hand;
/// the next periodic run (short interval here) restores it with one write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_run_repairs_drift_introduced_later() {
    let mut env = Env::start().await;
    let r = env
        .reconciler("pod-a", |c| {
            c.interval = std::time::Duration::from_millis(200)
        })
        .await;
    env.wait_leader(r).await;
    let value = example_policy_value();
    let exp = expectations(&env.api, &env.serving_keys(), &policy_of(&value));
    env.create_policy(value);
    env.wait_converged(&exp).await;
    let controller: Key = ("Deployment".into(), SERVING.into(), "controller".into());
    assert_eq!(patches(&env.api, &controller), 1);

    env.api
        .update("apps", "deployments", SERVING, "controller", |d| {
            d["spec"]["replicas"] = json!(1);
        });
    let api = env.api.clone();
    let c = controller.clone();
    wait_until(
        "controller scaled back to 3 by a periodic run",
        async || (current(&api, &c)["spec"]["replicas"] == 3).then_some(()),
    )
    .await;
    assert_eq!(patches(&env.api, &controller), 2);
    assert_eq!(
        content(&current(&env.api, &controller)),
        exp[&controller].clone().unwrap()
    );
}

/// Safety: without pod templates, a replicas change that would
/// leave `--disable-ha` on several replicas is held back, and so are the
/// config-leader-election keys (their restart is a pod template change).
#[test]
fn pod_templates_false_holds_back_unsafe_writes() {
    use knative_ha_webhook::reconcile::plan::{op_path, plan};
    let policy = policy_of(&example_policy_value());
    let known = Snapshot::from_policies([policy.clone()]);
    let mut d = support::fixture("Deployment", SERVING, "net-kourier-controller");
    d["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["--disable-ha"]);
    let with = plan(&known, SERVING, &d, true).unwrap().expect("drift");
    let paths: Vec<String> = with.patch.0.iter().map(op_path).collect();
    assert!(paths.contains(&"/spec/replicas".to_string()), "{paths:?}");
    let without = plan(&known, SERVING, &d, false).unwrap().expect("drift");
    let paths: Vec<String> = without.patch.0.iter().map(op_path).collect();
    assert!(
        !paths
            .iter()
            .any(|p| p == "/spec/replicas" || p.starts_with("/spec/template")),
        "{paths:?}"
    );
    assert!(
        without.held_back >= 2,
        "replicas and the flag held back: {}",
        without.held_back
    );
    // Without the flag, replicas go out alone.
    let plain = support::fixture("Deployment", SERVING, "net-kourier-controller");
    let d = plan(&known, SERVING, &plain, false)
        .unwrap()
        .expect("drift");
    assert!(d.patch.0.iter().map(op_path).any(|p| p == "/spec/replicas"));

    let cm = support::fixture("ConfigMap", SERVING, "config-leader-election");
    let d = plan(&known, SERVING, &cm, false).unwrap().expect("drift");
    assert!(d.patch.0.is_empty(), "{:?}", d.patch);
    assert!(d.held_back > 0);
    let d = plan(&known, SERVING, &cm, true).unwrap().expect("drift");
    assert!(!d.patch.0.is_empty());
}
