//! PodDisruptionBudgets, watched in each namespace with a policy in force
//! ([`super::namespace_watches`]), so that the reconciler acts on a budget
//! change within seconds instead of at its next full run: a release that
//! ships a PDB over the pods of a budget the reconciler created (two
//! budgets over one pod make the Eviction API refuse every eviction of it
//! with a 500, and `kubectl drain` retries only 429s), or that takes over
//! a created budget's name.
//!
//! What counts of a PDB that the reconciler did not create (or that a
//! release took over, [`crate::engine::created::taken_over`]) is its
//! selector and budget fields; a watcher tells the state only when those
//! change or its first list completes: the disruption controller's status
//! writes (every budget, at every pod change) never wake the state task.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::{Api, ResourceExt};
use serde_json::{Value, json};

use super::namespace_watches::{Kind, Update};
use super::{Msg, Source};

impl Kind for PodDisruptionBudget {
    const SOURCE: Source = Source::Budgets;
    type Counts = String;
    type Value = BTreeMap<String, String>;

    fn api(client: kube::Client, namespace: &str) -> Api<PodDisruptionBudget> {
        Api::namespaced(client, namespace)
    }
    /// A PDB's selector and budget fields: None for a budget the
    /// reconciler created (its own writes are no news).
    fn counts(&self) -> Option<String> {
        let object = serde_json::to_value(self).unwrap_or(Value::Null);
        let created = crate::engine::created::created_for(&object).is_some()
            && !crate::engine::created::taken_over(&object);
        let spec = &object["spec"];
        let counts = json!([
            spec["selector"],
            spec["minAvailable"],
            spec["maxUnavailable"]
        ]);
        (!created).then(|| counts.to_string())
    }
    fn value(objects: &[Arc<PodDisruptionBudget>]) -> BTreeMap<String, String> {
        let counted = objects.iter().map(|p| Some((p.name_any(), p.counts()?)));
        counted.flatten().collect()
    }
    fn msg(namespace: String, id: u64, update: Update<Self::Value>) -> Msg {
        Msg::Budgets {
            namespace,
            id,
            update,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::cluster::namespace_watches::Fold;
    use kube::runtime::watcher::Event;

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

    #[test]
    fn only_a_release_budget_s_selector_or_fields_are_news() {
        let mut seen = Fold::default();
        let mut apply = |event| seen.apply(event);
        assert_eq!(apply(Event::Init), None);
        let listed = pdb("controller-pdb", "controller", true, 3);
        assert_eq!(apply(Event::InitApply(listed)), None);
        let first = apply(Event::InitDone).expect("first list");
        assert!(first.first_list);
        assert_eq!(first.value, None, "the created budget is not counted");
        // A release ships a budget over the same pods: news.
        let news = apply(Event::Apply(pdb("autoscaler", "controller", false, 3)));
        let news = news.expect("a new budget");
        assert_eq!(news.value.map(|v| v.len()), Some(1));
        // The disruption controller's status write: nothing.
        let status = pdb("autoscaler", "controller", false, 2);
        assert_eq!(apply(Event::Apply(status.clone())), None);
        // The created one changes: nothing.
        let created = pdb("controller-pdb", "controller", true, 2);
        assert_eq!(apply(Event::Apply(created)), None);
        // Gone: news.
        assert!(apply(Event::Delete(status)).is_some());
    }
}
