//! `knative-ha-webhook restore` against the fake API
//! server. The real Knative v1.23.0 control plane is reconciled to a
//! policy (what the webhook does), then restored: every governed object's
//! spec is the release's again, the records are gone, and the release's
//! own `kubectl apply` (its three-way merge keeps fields the last applied
//! configuration does not name) no longer ends with a PDB holding both
//! minAvailable and maxUnavailable. Exit codes as `audit`'s: 0 done, 1 a
//! dry run with something to restore, 2 errors.

use crate::support;
use crate::support::cli::Out;
use crate::support::cluster::reconcile_all;
use crate::support::fakeapi;

use std::path::Path;

use fakeapi::FakeApi;
use knative_ha_webhook::policy::Policy;
use serde_json::Value;

const SERVING: &str = "knative-serving";

/// `restore` with KUBECONFIG set to `kubeconfig` (and an empty HOME).
async fn restore(kubeconfig: &Path, args: &[&str]) -> Out {
    crate::support::cli::cluster_command("restore", Some(kubeconfig), args).await
}

/// Everything the engine writes: Required zone anti-affinity, spread,
/// a maxUnavailable PDB, replicas, leader election.
fn policy() -> Policy {
    Policy::from_yaml(
        "apiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\nmetadata: {name: serving}\nspec:\n  targetNamespace: knative-serving\n  replicas: 3\n  podAntiAffinity: {type: Required, topologyKey: topology.kubernetes.io/zone}\n  topologySpreadConstraints: [{topologyKey: topology.kubernetes.io/zone, maxSkew: 1, whenUnsatisfiable: ScheduleAnyway}]\n  podDisruptionBudget: {maxUnavailable: 1}\n  leaderElection: {enabled: true, buckets: 3}\n",
    )
    .unwrap()
}

/// The governed objects of knative-serving in the fake, with the release
/// object each was created from.
fn pairs(api: &FakeApi) -> Vec<(Value, Value)> {
    support::corpus::reconciled_objects()
        .into_iter()
        .filter(|(_, o)| o["metadata"]["namespace"] == SERVING)
        .map(|((group, plural), release)| {
            let name = release["metadata"]["name"].as_str().unwrap();
            let stored = api.get(group, plural, SERVING, name).expect("stored");
            (release, stored)
        })
        .collect()
}

/// The `spec` (ConfigMaps: `data`) of an object.
fn body(o: &Value) -> &Value {
    if o["kind"] == "ConfigMap" {
        &o["data"]
    } else {
        &o["spec"]
    }
}

fn records(o: &Value) -> Vec<String> {
    let template = &o["spec"]["template"]["metadata"]["annotations"];
    [&o["metadata"]["annotations"], template]
        .into_iter()
        .filter_map(Value::as_object)
        .flat_map(|a| a.keys())
        .filter(|k| k.starts_with("knativeha.dev/"))
        .cloned()
        .collect()
}

/// What a client-side `kubectl apply` of the release leaves: the release's
/// fields over the stored ones (the fields it never set are kept).
fn applied_over(stored: &Value, release: &Value) -> Value {
    let mut out = stored.clone();
    json_patch::merge(&mut out, release);
    out
}

fn both_pdb_fields(o: &Value) -> bool {
    o["kind"] == "PodDisruptionBudget"
        && o["spec"].get("minAvailable").is_some()
        && o["spec"].get("maxUnavailable").is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_puts_the_release_back_and_the_release_applies() {
    let api = FakeApi::start().await;
    for ((group, plural), obj) in support::corpus::reconciled_objects() {
        api.create(group, plural, obj);
    }
    reconcile_all(&api, &policy()).await;
    let governed = pairs(&api);
    // The budget stays in the field the release sets: the release applied
    // over the governed PDBs (the webhook down) never holds both fields.
    assert!(
        !governed
            .iter()
            .any(|(release, stored)| both_pdb_fields(&applied_over(stored, release))),
        "a reconciled PDB would hold both fields after the release's apply"
    );
    let kc = api.kubeconfig_path();

    // Dry run: what would change, exit 1, nothing written.
    let out = restore(kc, &["--namespace", SERVING, "--dry-run"]).await;
    assert_eq!(
        out.code, 1,
        "stdout:\n{}\nstderr:\n{}",
        out.stdout, out.stderr
    );
    assert!(
        out.stdout.contains(
            "knative-serving  PodDisruptionBudget  poddisruptionbudget/activator-pdb: spec.minAvailable \"66%\" -> \"80%\" (restored)"
        ),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("dry run: would restore "),
        "{}",
        out.stdout
    );
    assert_eq!(pairs(&api), governed, "a dry run writes nothing");

    // The real thing: exit 0, every spec the release's, no record left.
    let out = restore(kc, &["--namespace", SERVING]).await;
    assert_eq!(
        out.code, 0,
        "stdout:\n{}\nstderr:\n{}",
        out.stdout, out.stderr
    );
    assert!(out.stdout.contains("restored "), "{}", out.stdout);
    for (release, stored) in pairs(&api) {
        let what = support::corpus::label(&release);
        assert_eq!(body(&stored), body(&release), "{what}");
        assert!(
            records(&stored).is_empty(),
            "{what}: {:?}",
            records(&stored)
        );
        let applied = applied_over(&stored, &release);
        assert!(!both_pdb_fields(&applied), "{what}: the release applies");
        assert_eq!(body(&applied), body(&release), "{what}");
    }
    let patches: Vec<_> = api
        .requests()
        .into_iter()
        .filter(|r| {
            r.method == "PATCH" && r.query.contains("fieldManager=knative-ha-webhook-restore")
        })
        .collect();
    assert!(
        !patches.is_empty(),
        "restore writes as its own field manager"
    );

    // Again: nothing to do.
    let out = restore(kc, &["--namespace", SERVING, "-o", "json"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let j: Value = serde_json::from_str(&out.stdout).expect("JSON report");
    assert_eq!(j["restored"], serde_json::json!([]));
    assert_eq!(j["namespace"], SERVING);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_errors_exit_2_with_a_clear_message() {
    let api = FakeApi::start().await;
    for ((group, plural), obj) in support::corpus::reconciled_objects() {
        api.create(group, plural, obj);
    }
    let kc = api.kubeconfig_path().to_path_buf();

    let out = restore(&kc, &["--namespace", "nope"]).await;
    assert_eq!(out.code, 2, "{}", out.stdout);
    assert!(
        out.stderr
            .starts_with("error: restore: namespace \"nope\" has no governed object"),
        "{}",
        out.stderr
    );

    let out = restore(&kc, &["--namespace", "Not_A_Name"]).await;
    assert_eq!(out.code, 2, "{}", out.stdout);
    assert!(
        out.stderr.contains("is not a namespace name"),
        "{}",
        out.stderr
    );

    api.fail_lists("policy", "poddisruptionbudgets", &[403]);
    let out = restore(&kc, &["--namespace", SERVING]).await;
    assert_eq!(out.code, 2, "{}", out.stdout);
    assert!(
        out.stderr.starts_with(
            "error: restore: restoring namespace knative-serving: list PodDisruptionBudget"
        ) && out.stderr.contains("403"),
        "{}",
        out.stderr
    );

    api.stop().await;
    let out = restore(&kc, &["--namespace", SERVING]).await;
    assert_eq!(out.code, 2, "{}", out.stdout);
    assert!(out.stderr.contains("connection refused"), "{}", out.stderr);
}

#[test]
fn offline_restore_of_previewed_manifests_gives_back_the_release() {
    let mut args = vec!["preview", "--policy-file", "examples/policy.yaml"];
    args.extend(support::FIXTURES);
    let previewed = support::run(&args);
    assert!(
        previewed.status.success(),
        "{}",
        support::stderr(&previewed)
    );
    let out = support::run_stdin(&["restore", "-"], &support::stdout(&previewed));
    assert!(out.status.success(), "{}", support::stderr(&out));
    let restored: Vec<Value> = serde_saphyr::from_multiple(&support::stdout(&out)).unwrap();
    let release = support::fixture_objects();
    assert_eq!(restored.len(), release.len());
    for (back, original) in restored.iter().zip(&release) {
        assert_eq!(back, original, "{}", support::corpus::label(original));
    }
    let changes = support::stderr(&out);
    assert!(
        changes.contains(
            "poddisruptionbudget/webhook-pdb: spec.minAvailable \"66%\" -> \"80%\" (restored)"
        ),
        "{changes}"
    );
    // The cluster flags do not mix with manifests.
    let out = support::run(&["restore", "--namespace", SERVING, "x.yaml"]);
    assert_eq!(out.status.code(), Some(2), "{}", support::stderr(&out));
}
