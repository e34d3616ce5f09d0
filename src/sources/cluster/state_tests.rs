//! The state's snapshot: what the per-namespace watchers found reaches it.

use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::{Value, json};

use super::*;
use crate::engine::leader::{HASH_ANNOTATION, settings_hash};
use crate::policy::LeaderElection;
use crate::sources::cluster::hpas::HpaUpdate;
use crate::sources::cluster::namespace_watches::Fold;
use crate::sources::cluster::namespace_watches::tests::NoSpawn;
use crate::sources::cluster::{WatchEvent, configmaps};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::runtime::watcher::Event;

const NS: &str = "knative-serving";

fn configmap(name: &str, data: Value) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "khw", "uid": name},
        "data": data,
    }))
    .unwrap()
}

/// A state with one policy ConfigMap in force in [`NS`] and the
/// per-namespace watchers started there (ids 1).
fn state_with_policy(store: &PolicyStore, metrics: &ClusterMetrics) -> State {
    let spawners = Spawners {
        hpas: Box::new(NoSpawn),
        leader_election: Box::new(NoSpawn),
        budgets: Box::new(NoSpawn),
        priority_classes: Box::new(NoSpawn),
    };
    let mut state = State::new(
        spawners,
        AllowedNamespaces::all(),
        crate::findings::Board::default().subscribe(),
    );
    let policy = format!(
        "apiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\nmetadata: {{name: p}}\nspec:\n  targetNamespace: {NS}\n  leaderElection: {{renewDeadline: 20s}}\n"
    );
    let observed = configmaps::observe(&configmap("ha", json!({"policy.yaml": policy})));
    for change in [
        WatchEvent::Init,
        WatchEvent::InitApply("ha".into(), Box::new(observed)),
        WatchEvent::InitDone,
    ] {
        state.apply(Msg::Watch(Source::ConfigMaps, change));
    }
    state.apply(Msg::Watch(Source::Policies, WatchEvent::Missing));
    state.publish(store, metrics);
    state
}

#[test]
fn config_leader_election_reaches_the_snapshot_and_the_hash() {
    let (store, metrics) = (PolicyStore::default(), ClusterMetrics::default());
    let mut state = state_with_policy(&store, &metrics);
    assert!(
        !store.load().synced,
        "the namespace's watchers have not listed"
    );
    let first_list = HpaUpdate {
        value: None,
        first_list: true,
    };
    state.apply(Msg::Hpa {
        namespace: NS.into(),
        id: 1,
        update: first_list,
    });
    // The watcher's fold over its first list of config-leader-election.
    let mut seen = Fold::<ConfigMap>::default();
    let cm = configmap(
        "config-leader-election",
        json!({"retryPeriod": "30s", "_example": "..."}),
    );
    seen.apply(Event::Init);
    seen.apply(Event::InitApply(cm));
    let update = seen.apply(Event::InitDone).expect("first list");
    assert!(state.apply(Msg::LeaderElection {
        namespace: NS.into(),
        id: 1,
        update,
    }));
    state.publish(&store, &metrics);
    let snapshot = store.load();
    assert!(snapshot.synced);
    assert_eq!(
        Value::Object(snapshot.leader_election[NS].clone()),
        json!({"retryPeriod": "30s"})
    );
    // The request path: renew 20s < 1.2 x retry 30s holds the durations
    // back, so the hash is the one of no durations.
    let controller = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "controller", "namespace": NS},
        "spec": {"template": {"spec": {"containers": [{"name": "controller"}]}}}});
    let input = crate::engine::Input {
        operation: crate::engine::Operation::Create,
        namespace: NS,
        object: &controller,
    };
    let governed = crate::engine::Answering::Governed(&snapshot);
    let m = crate::engine::outcome(governed, &input).unwrap().mutation;
    let want = settings_hash(&LeaderElection::default());
    let lines = m.lines();
    let line = lines.iter().find(|c| c.contains(HASH_ANNOTATION));
    assert!(line.is_some_and(|c| c.contains(&want)), "{lines:?}");
    // The policy goes: the watch stops and its data leaves the snapshot.
    state.apply(Msg::Watch(
        Source::ConfigMaps,
        WatchEvent::Delete("ha".into()),
    ));
    state.publish(&store, &metrics);
    assert!(store.load().leader_election.is_empty());
}

/// A release's budget in a governed namespace reaches the snapshot (so the
/// reconciler's schedule runs the namespace within a poll, not at the next
/// full run), and the disruption controller's status writes never do.
#[test]
fn a_release_budget_reaches_the_snapshot() {
    let (store, metrics) = (PolicyStore::default(), ClusterMetrics::default());
    let mut state = state_with_policy(&store, &metrics);
    let mut seen = Fold::<PodDisruptionBudget>::default();
    seen.apply(Event::Init);
    let first = seen.apply(Event::InitDone).expect("first list");
    assert!(!state.apply(Msg::Budgets {
        namespace: NS.into(),
        id: 1,
        update: first,
    }));
    let budget: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "autoscaler", "namespace": NS},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "autoscaler"}}},
        "status": {"currentHealthy": 0, "desiredHealthy": 1, "disruptionsAllowed": 1,
                   "expectedPods": 1},
    }))
    .unwrap();
    let update = seen
        .apply(Event::Apply(budget.clone()))
        .expect("a new budget is news");
    assert!(state.apply(Msg::Budgets {
        namespace: NS.into(),
        id: 1,
        update,
    }));
    state.publish(&store, &metrics);
    assert_eq!(store.load().budgets[NS].len(), 1);
    // A stopped watcher's leftovers change nothing.
    let stale = seen.apply(Event::Delete(budget)).unwrap();
    assert!(!state.apply(Msg::Budgets {
        namespace: NS.into(),
        id: 99,
        update: stale,
    }));
}
