//! `config-leader-election`, watched in each namespace with a policy in
//! force ([`super::namespace_watches`]; one ConfigMap: the field selector
//! `metadata.name=config-leader-election`), for the engine's hold-back of
//! the policy's durations in the leader-election hash
//! ([`crate::engine::Facts::leader_election`]). Only the duration keys
//! are kept; each watcher folds its events in its own task
//! ([`WatchData`]) and tells the state only when they change or its first
//! list completes.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::runtime::watcher;
use serde_json::{Map, Value};
use tokio::task::JoinHandle;

use super::namespace_watches::{NamespaceWatches, Sink, Spawn, Update};
use super::{Item, Msg, Source, WatchEvent};
use crate::engine::LEADER_ELECTION_CONFIGMAP;

/// The duration keys of `config-leader-election` per namespace (absent when
/// it has none, or is not there).
pub(crate) type LeaderElectionWatches = NamespaceWatches<Map<String, Value>>;

/// What a watcher tells the state: the duration keys when they changed.
pub(crate) type LeaderElectionUpdate = Update<Map<String, Value>>;

/// What these watches are logged as.
pub(crate) const WHAT: &str = "ConfigMap config-leader-election";

/// The ConfigMap's key (its name) and what the engine's context holds of it
/// (its duration keys, its opt-out label and Operator owner:
/// [`crate::engine::configmap::context_data`]).
pub(crate) fn into_parts(cm: ConfigMap) -> (String, Map<String, Value>) {
    let name = cm.metadata.name.clone().unwrap_or_default();
    let object = serde_json::to_value(&cm).unwrap_or(Value::Null);
    (name, crate::engine::configmap::context_data(&object))
}

/// Starts real watchers through the API server.
pub(crate) struct KubeSpawner {
    pub client: kube::Client,
    pub sink: Sink,
}

impl Spawn for KubeSpawner {
    fn spawn(&self, namespace: &str, id: u64) -> Option<JoinHandle<()>> {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), namespace);
        let config = watcher::Config::default()
            .fields(&format!("metadata.name={LEADER_ELECTION_CONFIGMAP}"));
        let ns = namespace.to_string();
        let mut seen = WatchData::default();
        Some(self.sink.spawn(
            Source::LeaderElection,
            namespace,
            api,
            config,
            |cm: ConfigMap| {
                let (key, data) = into_parts(cm);
                (key, Item::LeaderElection(data))
            },
            move |change| {
                let update = seen.apply(change)?;
                Some(Msg::LeaderElection {
                    namespace: ns.clone(),
                    id,
                    update,
                })
            },
        ))
    }
}

/// One watcher's view of its namespace's ConfigMap, kept in its task.
#[derive(Debug, Default)]
pub(crate) struct WatchData {
    data: Map<String, Value>,
    /// A relist in progress: what it listed so far.
    pending: Option<Map<String, Value>>,
    synced: bool,
}

impl WatchData {
    /// Folds one watcher change in; the update for the state, or None when
    /// the duration keys did not change and no first list completed.
    pub(crate) fn apply(&mut self, change: WatchEvent) -> Option<LeaderElectionUpdate> {
        let data = |item: Item| match item {
            Item::LeaderElection(d) => Some(d),
            Item::Policy(_) | Item::Hpa(_) | Item::Budget(_) | Item::PriorityClass => None,
        };
        let mut first_list = false;
        let next = match change {
            WatchEvent::Init => {
                self.pending = Some(Map::new());
                None
            }
            WatchEvent::InitApply(_, item) => {
                self.pending = data(item).or(self.pending.take());
                None
            }
            WatchEvent::InitDone | WatchEvent::Missing => {
                first_list = !self.synced;
                self.synced = true;
                Some(self.pending.take().unwrap_or_default())
            }
            WatchEvent::Apply(_, item) => data(item),
            WatchEvent::Delete(_) => Some(Map::new()),
        };
        let changed = match next {
            Some(d) if d != self.data => {
                self.data = d;
                true
            }
            _ => false,
        };
        (changed || first_list).then(|| Update {
            value: changed.then(|| self.data.clone()),
            first_list,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm(data: Value) -> ConfigMap {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "config-leader-election", "namespace": "knative-serving"},
            "data": data,
        }))
        .unwrap()
    }

    fn item(data: Value) -> Item {
        Item::LeaderElection(into_parts(cm(data)).1)
    }

    #[test]
    fn only_the_duration_keys_are_kept() {
        let (key, data) = into_parts(cm(json!({
            "_example": "a long text", "buckets": "5",
            "retryPeriod": "30s", "renew-deadline": "20s"})));
        assert_eq!(key, "config-leader-election");
        assert_eq!(
            Value::Object(data),
            json!({"retryPeriod": "30s", "renew-deadline": "20s"})
        );
    }

    #[test]
    fn the_fold_sends_only_changes_and_the_first_list() {
        let mut seen = WatchData::default();
        assert_eq!(seen.apply(WatchEvent::Init), None);
        let listed = WatchEvent::InitApply("c".into(), item(json!({"retryPeriod": "30s"})));
        assert_eq!(seen.apply(listed), None);
        let first = seen.apply(WatchEvent::InitDone).expect("first list");
        assert!(first.first_list);
        assert_eq!(
            first.value,
            Some(into_parts(cm(json!({"retryPeriod": "30s"}))).1)
        );
        // An edit of a key no rule reads: nothing sent.
        let edit = WatchEvent::Apply(
            "c".into(),
            item(json!({"retryPeriod": "30s", "buckets": "3"})),
        );
        assert_eq!(seen.apply(edit), None);
        // Deleted: the keys are gone.
        let gone = seen.apply(WatchEvent::Delete("c".into())).expect("deleted");
        assert_eq!((gone.value, gone.first_list), (Some(Map::new()), false));
        // A relist of the same (nothing): nothing sent.
        seen.apply(WatchEvent::Init);
        assert_eq!(seen.apply(WatchEvent::InitDone), None);
    }
}
