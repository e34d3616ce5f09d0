//! PodDisruptionBudgets, watched in each namespace with a policy in force
//! ([`super::namespace_watches`]), so that the reconciler acts on a budget
//! change within seconds instead of at its next full run: a release that
//! ships a PDB over the pods of a budget the reconciler created (two
//! budgets over one pod make the Eviction API refuse every eviction of it
//! with a 500, and `kubectl drain` retries only 429s), or that takes over
//! a created budget's name.
//!
//! Each watcher keeps, per PDB that the reconciler did not create (or that
//! a release took over, [`crate::engine::created::taken_over`]), its
//! selector and budget fields, and tells the state only when they change
//! or its first list completes: the disruption controller's status writes
//! (every budget, at every pod change) never wake the state task.

use std::collections::BTreeMap;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use super::namespace_watches::{Keyed, NamespaceWatches, Sink, Spawn, Update};
use super::{Item, Msg, Source};

/// What counts of a watched PDB (None: one the reconciler created).
pub(crate) fn counts(item: Item) -> Option<String> {
    match item {
        Item::Budget(c) => c,
        Item::Policy(_) | Item::Hpa(_) | Item::LeaderElection(_) | Item::PriorityClass => None,
    }
}

/// Per namespace: PDB name -> what a change of counts (its selector and
/// budget fields), for the PDBs the reconciler did not create.
pub(crate) type BudgetWatches = NamespaceWatches<BTreeMap<String, String>>;

/// What a watcher tells the state.
pub(crate) type BudgetUpdate = Update<BTreeMap<String, String>>;

/// What these watches are logged as.
pub(crate) const WHAT: &str = "PodDisruptionBudgets";

/// A PDB's key (its name) and what counts of it: None for a budget the
/// reconciler created (its own writes are no news).
pub(crate) fn into_parts(pdb: PodDisruptionBudget) -> (String, Option<String>) {
    let object = serde_json::to_value(&pdb).unwrap_or(Value::Null);
    let name = pdb.metadata.name.unwrap_or_default();
    let created = crate::engine::created::created_for(&object).is_some()
        && !crate::engine::created::taken_over(&object);
    let spec = &object["spec"];
    let counts = json!([
        spec["selector"],
        spec["minAvailable"],
        spec["maxUnavailable"]
    ]);
    (name, (!created).then(|| counts.to_string()))
}

/// Starts real watchers through the API server.
pub(crate) struct KubeSpawner {
    pub client: kube::Client,
    pub sink: Sink,
}

impl Spawn for KubeSpawner {
    fn spawn(&self, namespace: &str, id: u64) -> Option<JoinHandle<()>> {
        let api: Api<PodDisruptionBudget> = Api::namespaced(self.client.clone(), namespace);
        let ns = namespace.to_string();
        let mut seen = Keyed::default();
        Some(self.sink.spawn(
            Source::Budgets,
            namespace,
            api,
            watcher::Config::default(),
            |pdb: PodDisruptionBudget| {
                let (key, counts) = into_parts(pdb);
                (key, Item::Budget(counts))
            },
            move |change| {
                let update = seen.apply(change, counts)?;
                Some(Msg::Budgets {
                    namespace: ns.clone(),
                    id,
                    update,
                })
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::cluster::WatchEvent;

    fn pdb(name: &str, selector: &str, created: bool, status: i64) -> PodDisruptionBudget {
        let mut v = json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": "knative-serving"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": selector}}},
            "status": {"currentHealthy": status, "desiredHealthy": 1, "disruptionsAllowed": 1,
                       "expectedPods": 3, "observedGeneration": 1},
        });
        if created {
            let (key, value) = crate::engine::created::MANAGED_BY;
            v["metadata"]["annotations"] = json!({crate::engine::created::CREATED_FOR: selector});
            v["metadata"]["labels"] = json!({key: value});
        }
        serde_json::from_value(v).unwrap()
    }

    fn item(p: PodDisruptionBudget) -> (String, Item) {
        let (name, counts) = into_parts(p);
        (name, Item::Budget(counts))
    }

    #[test]
    fn only_a_release_budget_s_selector_or_fields_are_news() {
        let mut seen = Keyed::default();
        let mut apply = |change| seen.apply(change, counts);
        assert_eq!(apply(WatchEvent::Init), None);
        let (n, i) = item(pdb("controller-pdb", "controller", true, 3));
        assert_eq!(apply(WatchEvent::InitApply(n, i)), None);
        let first = apply(WatchEvent::InitDone).expect("first list");
        assert!(first.first_list);
        assert_eq!(first.value, None, "the created budget is not counted");
        // A release ships a budget over the same pods: news.
        let (n, i) = item(pdb("autoscaler", "controller", false, 3));
        let news = apply(WatchEvent::Apply(n, i)).expect("a new budget");
        assert_eq!(news.value.map(|v| v.len()), Some(1));
        // The disruption controller's status write: nothing.
        let (n, i) = item(pdb("autoscaler", "controller", false, 2));
        assert_eq!(apply(WatchEvent::Apply(n, i)), None);
        // The created one changes: nothing.
        let (n, i) = item(pdb("controller-pdb", "controller", true, 2));
        assert_eq!(apply(WatchEvent::Apply(n, i)), None);
        // Gone: news.
        assert!(apply(WatchEvent::Delete("autoscaler".into())).is_some());
    }
}
