//! `config-leader-election`, watched in each namespace with a policy in
//! force ([`super::namespace_watches`]; one ConfigMap: the field selector
//! `metadata.name=config-leader-election`), for the engine's hold-back of
//! the policy's durations in the leader-election hash
//! ([`crate::engine::Facts::leader_election`]). Only the duration keys
//! are kept, and a watcher tells the state only when they change or its
//! first list completes.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::runtime::watcher;
use serde_json::{Map, Value};

use super::namespace_watches::{Kind, Update};
use super::{Msg, Source};
use crate::engine::LEADER_ELECTION_CONFIGMAP;

/// What the engine's context holds of the ConfigMap (its duration keys,
/// its opt-out label and Operator owner:
/// [`crate::engine::configmap::context_data`]).
pub(crate) fn data(cm: &ConfigMap) -> Map<String, Value> {
    let object = serde_json::to_value(cm).unwrap_or(Value::Null);
    crate::engine::configmap::context_data(&object)
}

/// The one ConfigMap of a namespace watched (`config-leader-election`).
impl Kind for ConfigMap {
    const SOURCE: Source = Source::LeaderElection;
    type Counts = Map<String, Value>;
    type Value = Map<String, Value>;

    fn api(client: kube::Client, namespace: &str) -> Api<ConfigMap> {
        Api::namespaced(client, namespace)
    }
    fn config() -> watcher::Config {
        watcher::Config::default().fields(&format!("metadata.name={LEADER_ELECTION_CONFIGMAP}"))
    }
    fn counts(&self) -> Option<Map<String, Value>> {
        Some(data(self))
    }
    fn value(objects: &[Arc<ConfigMap>]) -> Map<String, Value> {
        objects.first().map(|cm| data(cm)).unwrap_or_default()
    }
    fn msg(namespace: String, id: u64, update: Update<Self::Value>) -> Msg {
        Msg::LeaderElection {
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
    use kube::runtime::reflector::ObjectRef;
    use kube::runtime::watcher::Event;
    use serde_json::json;

    fn cm(data: Value) -> ConfigMap {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "config-leader-election", "namespace": "knative-serving"},
            "data": data,
        }))
        .unwrap()
    }

    #[test]
    fn only_the_duration_keys_are_kept() {
        let cm = cm(json!({
            "_example": "a long text", "buckets": "5",
            "retryPeriod": "30s", "renew-deadline": "20s"}));
        let key = ObjectRef::from_obj(&cm);
        assert_eq!(key.name, "config-leader-election", "the store's key");
        assert_eq!(
            Value::Object(data(&cm)),
            json!({"retryPeriod": "30s", "renew-deadline": "20s"})
        );
    }

    #[test]
    fn the_fold_sends_only_changes_and_the_first_list() {
        let mut seen = Fold::default();
        assert_eq!(seen.apply(Event::Init), None);
        let listed = Event::InitApply(cm(json!({"retryPeriod": "30s"})));
        assert_eq!(seen.apply(listed), None);
        let first = seen.apply(Event::InitDone).expect("first list");
        assert!(first.first_list);
        assert_eq!(first.value, Some(data(&cm(json!({"retryPeriod": "30s"})))));
        // An edit of a key no rule reads: nothing sent.
        let edit = cm(json!({"retryPeriod": "30s", "buckets": "3"}));
        assert_eq!(seen.apply(Event::Apply(edit.clone())), None);
        // Deleted: the keys are gone.
        let gone = seen.apply(Event::Delete(edit)).expect("deleted");
        assert_eq!((gone.value, gone.first_list), (Some(Map::new()), false));
        // A relist of the same (nothing): nothing sent.
        seen.apply(Event::Init);
        assert_eq!(seen.apply(Event::InitDone), None);
    }
}
