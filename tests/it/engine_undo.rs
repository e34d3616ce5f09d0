//! Dropping `leaderElection` from a policy (or one of its
//! keys) puts back what leader election wrote, on the real Knative v1.23.0
//! objects: the `config-leader-election` keys as recorded (never into a
//! set client-go would refuse), the settings hash, and `--disable-ha` as
//! recorded (never on a Deployment running more than one replica or scaled
//! by an HPA: the invariant of `engine::leader`). What someone else set
//! since the engine's last write stays: a key changed since, a budget field
//! a release's apply re-added beside the engine's.

use crate::support;

use serde_json::{Value, json};
use support::corpus::GOVERNED;
use support::{differences, fixture, mutated, serving_policy as policy};

const WITH_LEADER_ELECTION: &str = "  replicas: 3\n  leaderElection: {enabled: true, buckets: 3, leaseDuration: 30s, renewDeadline: 20s, retryPeriod: 5s}\n";

fn annotations(object: &Value) -> Value {
    object["metadata"]["annotations"].clone()
}

#[test]
fn a_policy_without_leader_election_gives_back_the_release_configmap_and_deployments() {
    let with = policy(WITH_LEADER_ELECTION);
    let without = policy("  replicas: 3\n");
    let cm = fixture("ConfigMap", GOVERNED, "config-leader-election");
    let first = mutated(&with, &cm);
    assert_eq!(
        first["data"]["retry-period"], "5s",
        "the policy's keys are written"
    );
    let second = mutated(&without, &first);
    assert!(
        second == cm,
        "config-leader-election is the release's again: {:#?}",
        differences(&second, &cm)
    );
    for name in ["controller", "autoscaler", "autoscaler-hpa", "webhook"] {
        let release = fixture("Deployment", GOVERNED, name);
        let first = mutated(&with, &release);
        let hash = &first["spec"]["template"]["metadata"]["annotations"]["knativeha.dev/leader-election-hash"];
        assert!(hash.is_string(), "{name}: the settings hash is written");
        let second = mutated(&without, &first);
        assert_eq!(
            second["spec"]["template"], release["spec"]["template"],
            "{name}: the pod template is the release's again (the pods roll together)"
        );
        assert!(
            mutated(&without, &second) == second,
            "{name}: the undo is done once"
        );
    }
}

#[test]
fn ha_disabled_then_a_policy_without_leader_election_takes_disable_ha_off() {
    let disabled = support::load_policy("examples/policies/ha-disabled.yaml");
    let bare = policy("");
    // (ha-disabled sets one replica; autoscaler-hpa takes --disable-ha.)
    let release = fixture("Deployment", GOVERNED, "autoscaler-hpa");
    let first = mutated(&disabled, &release);
    assert!(
        first.to_string().contains("--disable-ha"),
        "ha-disabled adds the flag"
    );
    let second = mutated(&bare, &first);
    assert!(second == release, "{:#?}", differences(&second, &release));
}

/// A release that ships `--disable-ha` on autoscaler-hpa (one replica).
fn flagged_autoscaler_hpa() -> Value {
    let mut d = fixture("Deployment", GOVERNED, "autoscaler-hpa");
    d["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["--disable-ha"]);
    d
}

#[test]
fn disable_ha_comes_back_only_with_the_release_s_one_replica() {
    let release = flagged_autoscaler_hpa();
    let three = mutated(&policy("  replicas: 3\n"), &release);
    assert!(
        !three.to_string().contains("--disable-ha"),
        "three replicas: the flag goes"
    );
    assert_eq!(
        annotations(&three)["knativeha.dev/original-disable-ha"],
        "true"
    );
    // Still two replicas and no leaderElection: the flag stays off, the
    // record stays (several replicas without a leader all reconcile).
    let two = mutated(&policy("  replicas: 2\n"), &three);
    assert!(!two.to_string().contains("--disable-ha"));
    assert_eq!(
        annotations(&two)["knativeha.dev/original-disable-ha"],
        "true"
    );
    // No replicas either: the release's one replica, and its flag, are back.
    let back = mutated(&policy(""), &two);
    assert!(back == release, "{:#?}", differences(&back, &release));
}

#[test]
fn a_policy_without_retry_period_undoes_a_recorded_retry_period() {
    let cm = fixture("ConfigMap", GOVERNED, "config-leader-election");
    let first = mutated(&policy(WITH_LEADER_ELECTION), &cm);
    let second = mutated(
        &policy("  leaderElection: {buckets: 3, leaseDuration: 30s, renewDeadline: 20s}\n"),
        &first,
    );
    let data = &second["data"];
    assert_eq!(
        (
            &data["buckets"],
            &data["lease-duration"],
            &data["renew-deadline"]
        ),
        (&json!("3"), &json!("30s"), &json!("20s")),
        "the keys the policy still sets stay"
    );
    assert!(data.get("retry-period").is_none(), "{data}");
    assert!(
        annotations(&second)
            .get("knativeha.dev/original-data-retry-period")
            .is_none(),
        "the record goes with the undo"
    );
}

#[test]
fn an_undo_that_client_go_would_refuse_is_not_made() {
    // The release sets retry-period 30s; a first policy writes 5s; a second
    // sets leaseDuration 30s and renewDeadline 20s (valid with Knative's
    // default retry-period 10s) but no retryPeriod: putting the release's
    // 30s back would leave renew-deadline 20s under 1.2 x 30s, and
    // client-go's leader election refuses to start.
    let mut cm = fixture("ConfigMap", GOVERNED, "config-leader-election");
    cm["data"]["retry-period"] = json!("30s");
    let first = mutated(&policy(WITH_LEADER_ELECTION), &cm);
    assert_eq!(first["data"]["retry-period"], "5s");
    let second_policy =
        policy("  leaderElection: {buckets: 3, leaseDuration: 30s, renewDeadline: 20s}\n");
    let input = knative_ha_webhook::engine::Input {
        operation: knative_ha_webhook::engine::Operation::Update,
        namespace: GOVERNED,
        object: &first,
    };
    let m = knative_ha_webhook::engine::outcome(
        knative_ha_webhook::engine::Answering::Governed(
            &knative_ha_webhook::engine::Snapshot::from_policies([second_policy.clone()]),
        ),
        &input,
    )
    .map(|o| o.mutation)
    .unwrap();
    assert!(m.is_empty(), "nothing changes: {:?}", m.patch);
    assert!(
        m.lines()
            .iter()
            .any(|c| c.contains("not put back") && c.contains("retry-period \"30s\"")),
        "a warning says why: {:?}",
        m.changes
    );
}

#[test]
fn a_key_someone_else_changed_since_the_engine_wrote_it_is_kept_when_the_record_goes() {
    // The e2e reproduction: a policy writes retry-period 5s; an admin then
    // sets it to 30s; a later policy no longer sets retryPeriod. The undo
    // would put the release's unset back over the admin's 30s: it keeps it.
    let cm = fixture("ConfigMap", GOVERNED, "config-leader-election");
    let mut first = mutated(&policy(WITH_LEADER_ELECTION), &cm);
    assert_eq!(first["data"]["retry-period"], "5s");
    first["data"]["retry-period"] = json!("30s");
    let second = mutated(
        &policy("  leaderElection: {buckets: 3, leaseDuration: 30s, renewDeadline: 20s}\n"),
        &first,
    );
    assert_eq!(second["data"]["retry-period"], "30s", "{}", second["data"]);
    let left = annotations(&second);
    for record in [
        "knativeha.dev/original-data-retry-period",
        "knativeha.dev/written-data-retry-period",
    ] {
        assert!(left.get(record).is_none(), "{record} goes: {left}");
    }
    // Its own write is still undone where nobody touched it.
    let third = mutated(&policy(""), &second);
    assert!(
        third["data"].get("lease-duration").is_none(),
        "{}",
        third["data"]
    );
}

#[test]
fn a_release_apply_that_re_adds_its_budget_beside_the_engine_s_gets_the_release_s_budget() {
    // The e2e reproduction (a restart on a stricter release): the engine
    // wrote maxUnavailable 1 over activator-pdb's minAvailable 80%; the
    // release's `kubectl apply` re-adds minAvailable (its last-applied
    // never held maxUnavailable) while no policy setting asks for a budget
    // any more. The API server refuses a PDB with both: the engine's goes.
    // (An earlier version moved the budget to maxUnavailable; the engine
    // now keeps it in the release's field, so this state comes only from
    // an object that earlier version wrote.)
    let shipped = fixture("PodDisruptionBudget", GOVERNED, "activator-pdb");
    assert_eq!(shipped["spec"]["minAvailable"], "80%");
    let mut applied = shipped.clone();
    applied["spec"]["maxUnavailable"] = json!(1);
    applied["metadata"]["annotations"] = json!({
        "knativeha.dev/original-budget": "{\"minAvailable\":\"80%\"}",
        "knativeha.dev/written-budget": "{\"maxUnavailable\":1}",
    });
    let out = mutated(&policy("  replicas: 3\n"), &applied);
    assert_eq!(
        out["spec"],
        shipped["spec"],
        "{:#?}",
        differences(&out, &shipped)
    );
    assert_eq!(annotations(&out), annotations(&shipped), "no records left");
}
