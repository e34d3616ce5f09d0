//! The engine over an object's life, read against Knative's own
//! code: the legacy leader-election keys knative.dev/pkg still reads
//! (`leaderelection/config.go`), the replicas a PodDisruptionBudget really
//! protects, HPA values someone else set, the opt-out label.

use crate::support;
use support::serving_policy as policy;

use knative_ha_webhook::engine::Operation;
use knative_ha_webhook::policy::Policy;
use serde_json::{Value, json};

const NS: &str = "knative-serving";
const JITTER: &str = "(client-go's JitterFactor; its leader election refuses to start otherwise)";
const LEASE: &str = "(client-go leader election refuses to start otherwise)";

/// [`support::mutate_checked`] of an UPDATE.
fn run_ns(p: &Policy, ns: &str, object: &Value) -> (Value, Vec<String>) {
    support::mutate_checked(p, ns, Operation::Update, object)
}

fn run(p: &Policy, object: &Value) -> (Value, Vec<String>) {
    run_ns(p, NS, object)
}

/// Knative's `config-leader-election` with `data` added to what it ships.
fn leader_cm(data: Value) -> Value {
    let mut cm = support::fixture("ConfigMap", NS, "config-leader-election");
    for (k, v) in data.as_object().unwrap() {
        cm["data"][k] = v.clone();
    }
    cm
}

fn warning(changes: &[String]) -> Option<&str> {
    changes
        .iter()
        .find(|c| c.contains("warning"))
        .map(String::as_str)
}

/// knative.dev/pkg reads `leaseDuration`/`renewDeadline`/
/// `retryPeriod` first and a kebab-case key overrides only the key it names;
/// the merged check reads the ConfigMap that way, so the engine never writes
/// a set client-go's NewLeaderElector refuses.
#[test]
fn legacy_camel_case_keys_count_in_the_merged_check() {
    let held = |spec: &str, data: Value, want: String| {
        let cm = leader_cm(data.clone());
        let (out, changes) = run(&policy(spec), &cm);
        for key in ["lease-duration", "renew-deadline", "retry-period"] {
            assert_eq!(
                out["data"].get(key),
                cm["data"].get(key),
                "{spec} {data}: {key}"
            );
        }
        assert_eq!(
            warning(&changes),
            Some(
                format!(
                    "configmap/config-leader-election: warning: leader election durations not written: {want} (policy p)"
                )
                .as_str()
            ),
            "{spec} {data}"
        );
    };
    // A legacy key on either side of the renew/retry check.
    held(
        "  leaderElection: {renewDeadline: 20s}\n",
        json!({"retryPeriod": "30s"}),
        format!(
            "renew-deadline \"20s\" (policy) must be greater than retryPeriod \"30s\" (ConfigMap, legacy key Knative still reads) x 1.2 = 36s {JITTER}"
        ),
    );
    held(
        "  leaderElection: {retryPeriod: 10s}\n",
        json!({"renewDeadline": "10s"}),
        format!(
            "renewDeadline \"10s\" (ConfigMap, legacy key Knative still reads) must be greater than retry-period \"10s\" (policy) x 1.2 = 12s {JITTER}"
        ),
    );
    // The lease: a legacy leaseDuration below the policy's renewDeadline.
    held(
        "  leaderElection: {renewDeadline: 20s, retryPeriod: 5s}\n",
        json!({"leaseDuration": "15s"}),
        format!(
            "leaseDuration \"15s\" (ConfigMap, legacy key Knative still reads) must be greater than renew-deadline \"20s\" (policy) {LEASE}"
        ),
    );
    // A kebab key in the ConfigMap overrides the legacy key it names, and
    // only that one.
    held(
        "  leaderElection: {retryPeriod: 10s}\n",
        json!({"renewDeadline": "50s", "renew-deadline": "11s", "retryPeriod": "1s"}),
        format!(
            "renew-deadline \"11s\" (ConfigMap) must be greater than retry-period \"10s\" (policy) x 1.2 = 12s {JITTER}"
        ),
    );
    // Knative refuses the whole ConfigMap when a legacy value does not parse,
    // kebab key or not: nothing the engine writes can make it start.
    held(
        "  leaderElection: {retryPeriod: 10s}\n",
        json!({"retryPeriod": "10 s"}),
        "retryPeriod \"10 s\" (ConfigMap, legacy key Knative still reads) is not a Go duration: unknown unit \" s\" (use ns, us, ms, s, m or h)".to_string(),
    );
}

#[test]
fn legacy_keys_that_keep_the_rules_let_the_durations_through() {
    // The kebab keys the policy writes override the legacy ones they name.
    let cm =
        leader_cm(json!({"leaseDuration": "15s", "renewDeadline": "10s", "retryPeriod": "2s"}));
    let p =
        policy("  leaderElection: {leaseDuration: 60s, renewDeadline: 40s, retryPeriod: 10s}\n");
    let (out, changes) = run(&p, &cm);
    assert_eq!(warning(&changes), None, "{changes:?}");
    assert_eq!(out["data"]["lease-duration"], "60s");
    assert_eq!(out["data"]["renew-deadline"], "40s");
    assert_eq!(out["data"]["retry-period"], "10s");
    assert_eq!(out["data"]["retryPeriod"], "2s", "the legacy keys stay");
    // renew 40s over a legacy retry 30s: 40s > 36s.
    let cm = leader_cm(json!({"retryPeriod": "30s"}));
    let (out, changes) = run(&policy("  leaderElection: {renewDeadline: 40s}\n"), &cm);
    assert_eq!(warning(&changes), None, "{changes:?}");
    assert_eq!(out["data"]["renew-deadline"], "40s");
}

/// client-go also refuses a zero duration (`retryPeriod must be greater than
/// zero`), which only the ConfigMap can hold (the policy refuses it).
#[test]
fn a_zero_duration_in_the_configmap_holds_the_durations_back() {
    let cm = leader_cm(json!({"retry-period": "0"}));
    let (out, changes) = run(&policy("  leaderElection: {renewDeadline: 30s}\n"), &cm);
    assert!(out["data"].get("renew-deadline").is_none(), "{out}");
    assert_eq!(
        warning(&changes),
        Some(
            "configmap/config-leader-election: warning: leader election durations not written: retry-period \"0\" (ConfigMap) must be greater than zero (client-go leader election refuses to start otherwise) (policy p)"
        )
    );
}

fn policy_in(ns: &str, spec: &str) -> Policy {
    let text = format!(
        "apiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\nmetadata: {{name: p}}\nspec:\n  targetNamespace: {ns}\n{spec}"
    );
    Policy::from_yaml(&text).unwrap_or_else(|e| panic!("{spec}: {e}"))
}

/// The budget Knative Eventing ships for eventing-webhook (HPA-backed,
/// minReplicas 1).
fn eventing_webhook_pdb() -> Value {
    json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "eventing-webhook", "namespace": "knative-eventing",
                     "labels": {"app.kubernetes.io/name": "knative-eventing"}},
        "spec": {"minAvailable": "80%", "selector": {"matchLabels": {"app": "eventing-webhook"}}}})
}

/// A policy giving eventing-webhook 4 replicas
/// and `minAvailable: 3`, then one that no longer raises it: the HPA goes
/// back to 1, and the budget the engine wrote would block every drain
/// there, so what it replaced comes back.
#[test]
fn a_budget_the_engine_wrote_comes_back_when_it_would_block_every_drain() {
    let ns = "knative-eventing";
    let raised = policy_in(
        ns,
        "  workloads:\n  - name: eventing-webhook\n    replicas: 4\n    podDisruptionBudget: {minAvailable: 3}\n",
    );
    let later = policy_in(ns, "  leaderElection: {buckets: 2}\n");
    let shipped = eventing_webhook_pdb();
    let (written, _) = run_ns(&raised, ns, &shipped);
    assert_eq!(written["spec"]["minAvailable"], 3);
    let (back, changes) = run_ns(&later, ns, &written);
    assert_eq!(back["spec"], shipped["spec"], "the release's budget");
    assert_eq!(
        back["metadata"]["annotations"], shipped["metadata"]["annotations"],
        "no records left"
    );
    assert_eq!(
        changes,
        [
            "poddisruptionbudget/eventing-webhook: spec.minAvailable 3 -> \"80%\" (restored: the engine's minAvailable 3 allows no voluntary disruption with 1 replica (spec.replicas unset: Knative ships 1 for eventing-webhook)) (policy p)"
        ]
    );
    assert_eq!(run_ns(&later, ns, &back).1, Vec::<String>::new());
    // A policy that no longer sets a budget gets the release's back, even
    // where the engine's still allowed a drain (what a dropped setting
    // wrote is undone); a budget someone else set since stays.
    let four = policy_in(ns, "  replicas: 4\n");
    let (undone, changes) = run_ns(&four, ns, &written);
    assert_eq!(undone["spec"], shipped["spec"], "{changes:?}");
    assert!(
        changes[0].contains("no policy setting asks for a budget any more"),
        "{changes:?}"
    );
    let mut theirs = written.clone();
    theirs["spec"]["minAvailable"] = json!(2);
    assert_eq!(run_ns(&later, ns, &theirs), (theirs.clone(), vec![]));
}

/// At admission: a budget that would allow no disruption at the
/// replicas that really run is not produced (eventing-controller scales
/// pingsource-mt-adapter 0 <-> 1, whatever `replicas` says).
#[test]
fn a_budget_that_would_block_at_what_runs_is_not_written() {
    let ns = "knative-eventing";
    let p = policy_in(
        ns,
        "  replicas: 3\n  podDisruptionBudget: {minAvailable: 2}\n",
    );
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "pingsource-mt-adapter", "namespace": ns},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "pingsource-mt-adapter"}}}});
    let (out, changes) = run_ns(&p, ns, &pdb);
    assert_eq!(out, pdb);
    assert_eq!(
        changes,
        [
            "poddisruptionbudget/pingsource-mt-adapter: warning: spec.minAvailable 2 not written: with 1 replica (pingsource-mt-adapter runs 0 or 1: eventing-controller scales it on demand, never to the policy's replicas) it allows no voluntary disruption, so every node drain and cluster upgrade would block (policy p)"
        ]
    );
}

fn hpa(min: i64, max: i64) -> Value {
    let mut h = support::fixture("HorizontalPodAutoscaler", NS, "activator");
    h["spec"]["minReplicas"] = json!(min);
    h["spec"]["maxReplicas"] = json!(max);
    h
}

fn min_max(h: &Value) -> (i64, i64) {
    (
        h["spec"]["minReplicas"].as_i64().unwrap(),
        h["spec"]["maxReplicas"].as_i64().unwrap(),
    )
}

/// A value that differs from the engine's own last write was set by
/// someone else (a release, an admin): the engine starts from it, as the
/// Knative Operator starts from the current values, and never lowers it.
#[test]
fn hpa_values_someone_else_set_since_the_engine_wrote_are_the_new_start() {
    let three = policy("  replicas: 3\n");
    let none = policy("  leaderElection: {buckets: 2}\n");
    let two = policy("  replicas: 2\n");
    let (raised, _) = run(&three, &hpa(1, 20));
    assert_eq!(min_max(&raised), (3, 22));
    // A release raises maxReplicas to 30 (`kubectl apply` leaves the
    // minReplicas it did not change).
    let mut released = raised.clone();
    released["spec"]["maxReplicas"] = json!(30);
    let (out, changes) = run(&none, &released);
    assert_eq!(min_max(&out), (1, 30), "{changes:?}");
    assert_eq!(
        changes,
        [
            "horizontalpodautoscaler/activator: spec.minReplicas 3 -> 1 (from 1/30: spec.maxReplicas 30 was set since the engine wrote 22) (policy p)"
        ]
    );
    let (out, _) = run(&three, &released);
    assert_eq!(
        min_max(&out),
        (3, 32),
        "the Operator's rule on the release's 1/30"
    );
    // An admin's minReplicas 3 is not lowered by replicas: 2.
    let (at2, _) = run(&two, &hpa(1, 20));
    assert_eq!(min_max(&at2), (2, 21));
    let mut admin = at2.clone();
    admin["spec"]["minReplicas"] = json!(3);
    let (out, changes) = run(&two, &admin);
    // Raising the minimum never takes the headroom back: the maximum moves
    // up with it (the release's 20 by the 2 raised), never below the
    // engine's 21.
    assert_eq!(min_max(&out), (3, 22), "{changes:?}");
    // What the engine then recorded holds: mutating again changes nothing,
    // and a policy without replicas keeps the admin's 3.
    assert_eq!(run(&two, &out).1, Vec::<String>::new());
    assert_eq!(min_max(&run(&none, &out).0), (3, 22));
    let (out, _) = run(&policy("  replicas: 5\n"), &out);
    assert_eq!(min_max(&out), (5, 24));
    // broker-ingress: the engine's 3/12 from the release's 1/10, an admin's
    // minimum 5 keeps 7 of headroom (the defect: 5/10).
    let (engine, _) = run(&policy("  replicas: 3\n"), &hpa(1, 10));
    assert_eq!(min_max(&engine), (3, 12));
    let mut admin = engine.clone();
    admin["spec"]["minReplicas"] = json!(5);
    assert_eq!(min_max(&run(&policy("  replicas: 3\n"), &admin).0), (5, 14));
}

/// HPAs an earlier release of the engine changed carry the originals only:
/// values that are one of its writes keep them; others were set since.
#[test]
fn hpas_with_only_the_originals_recorded() {
    let none = policy("  leaderElection: {buckets: 2}\n");
    let recorded = |min: i64, max: i64| {
        let mut h = hpa(min, max);
        h["metadata"]["annotations"] = json!({
            "knativeha.dev/original-min-replicas": "1",
            "knativeha.dev/original-max-replicas": "20"});
        h
    };
    assert_eq!(min_max(&run(&none, &recorded(3, 22)).0), (1, 20));
    assert_eq!(min_max(&run(&none, &recorded(3, 30)).0), (3, 30));
}

/// An object labelled `knativeha.dev/skip: "true"` never reaches
/// the webhook (the chart's objectSelector); the engine leaves it alone
/// too, so `preview`, `audit` and the reconciler agree with admission.
#[test]
fn objects_labelled_skip_are_never_changed() {
    let p = support::load_policy("examples/policy.yaml");
    let objects = [
        support::fixture("Deployment", NS, "controller"),
        support::fixture("HorizontalPodAutoscaler", NS, "activator"),
        support::fixture("PodDisruptionBudget", NS, "webhook-pdb"),
        support::fixture("ConfigMap", NS, "config-leader-election"),
    ];
    for object in objects {
        let what = support::corpus::label(&object);
        assert!(!run(&p, &object).1.is_empty(), "{what} is governed");
        let mut skipped = object.clone();
        skipped["metadata"]["labels"]["knativeha.dev/skip"] = json!("true");
        assert_eq!(run(&p, &skipped), (skipped.clone(), vec![]), "{what}");
        let mut not = object.clone();
        not["metadata"]["labels"]["knativeha.dev/skip"] = json!("false");
        assert!(!run(&p, &not).1.is_empty(), "{what}: only \"true\" skips");
    }
}

/// Integers at the edges never overflow the engine's arithmetic
/// (the rollout's 25%, a percentage of the replicas, an HPA's bump).
#[test]
fn extreme_integers_are_answered_without_overflow() {
    let required = policy(
        "  replicas: 3\n  podAntiAffinity: {type: Required}\n  workloads:\n  - {name: activator, replicas: 4}\n",
    );
    for replicas in [i64::MAX, i64::MIN, i64::MAX / 25 + 1, -1] {
        for max_unavailable in [None, Some(json!("50%")), Some(json!("100%"))] {
            // HPA-backed: the engine keeps its replicas and reads them.
            let mut d = support::fixture("Deployment", NS, "activator");
            d["spec"]["replicas"] = json!(replicas);
            if let Some(m) = &max_unavailable {
                d["spec"]["strategy"] =
                    json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": m}});
            } else {
                d["spec"].as_object_mut().unwrap().remove("strategy");
            }
            run(&required, &d);
        }
    }
    for (min, max) in [
        (i64::MIN, i64::MAX),
        (i64::MIN, i64::MIN),
        (0, i64::MAX),
        (-5, 1),
    ] {
        let (out, _) = run(&required, &hpa(min, max));
        let (m, x) = min_max(&out);
        assert!(m >= 4 && x >= m, "{min}/{max} -> {m}/{x}");
        // Recorded originals at the edges too.
        let mut h = hpa(4, 4);
        h["metadata"]["annotations"] = json!({
            "knativeha.dev/original-min-replicas": "0",
            "knativeha.dev/original-max-replicas": i64::MAX.to_string(),
            "knativeha.dev/written-min-replicas": min.to_string(),
            "knativeha.dev/written-max-replicas": max.to_string()});
        run(&required, &h);
    }
}

/// Eventing's imc-dispatcher and the Contour and Gateway API
/// net-* Deployments run sharedmain's leader election too: they roll with
/// the others when the buckets change (their lease names do).
#[test]
fn every_leader_elected_deployment_gets_the_settings_hash() {
    let p = policy_in("knative-eventing", "  leaderElection: {buckets: 2}\n");
    let q = policy("  leaderElection: {buckets: 2}\n");
    for (ns, name, p) in [
        ("knative-eventing", "imc-dispatcher", &p),
        (NS, "net-contour-controller", &q),
        (NS, "net-gateway-api-controller", &q),
        (NS, "net-gateway-api-webhook", &q),
    ] {
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "controller", "image": "img"}]}}}});
        let (out, changes) = run_ns(p, ns, &d);
        let hash = &out["spec"]["template"]["metadata"]["annotations"]["knativeha.dev/leader-election-hash"];
        assert!(hash.is_string(), "{name}: {changes:?}");
    }
}
