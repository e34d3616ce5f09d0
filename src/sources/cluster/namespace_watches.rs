//! Watches kept per namespace with a policy in force (never outside
//! `--governed-namespaces`): one watcher per namespace and [`Kind`] (HPAs,
//! PodDisruptionBudgets, `config-leader-election`; PriorityClasses once for
//! the cluster), started and stopped by the state as policies come and go.
//! Each watcher keeps its objects in a kube-runtime reflector store and
//! folds them into its namespace's value in its own task ([`Fold`]), so the
//! events that change nothing that counts (the HPA and disruption
//! controllers' status updates) never wake the state task.
//!
//! A watcher that was stopped may still have messages in the channel:
//! every watcher gets an id and messages of an old id are dropped.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::Arc;

use kube::runtime::reflector::{ObjectRef, store::Writer};
use kube::runtime::watcher;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;

use super::{ClusterMetrics, Msg, Source};

/// How the watchers are started (a client, or nothing in unit tests).
pub(crate) trait Spawn: Send {
    fn spawn(&self, namespace: &str, id: u64) -> Option<JoinHandle<()>>;
}

/// What a namespace's watcher tells the state, only when one of the two
/// is news.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Update<T> {
    /// The namespace's value, when it changed.
    pub value: Option<T>,
    /// This completed the watcher's first list.
    pub first_list: bool,
}

/// A kind watched per namespace: how it is watched, what counts of one
/// object and what the state is told.
pub(crate) trait Kind:
    Resource<DynamicType = ()> + Clone + Default + DeserializeOwned + Debug + Send + Sync + 'static
{
    /// The `source` metric label and log field.
    const SOURCE: Source;
    type Counts: PartialEq;
    /// A namespace's value, as the snapshot holds it.
    type Value: Clone + Debug + Default + PartialEq + Send + 'static;
    /// The objects watched for `namespace`.
    fn api(client: kube::Client, namespace: &str) -> Api<Self>;
    fn config() -> watcher::Config {
        watcher::Config::default()
    }
    /// What counts of this object (None: nothing, its changes are no news).
    fn counts(&self) -> Option<Self::Counts>;
    /// The namespace's value, from all its objects once listed.
    fn value(objects: &[Arc<Self>]) -> Self::Value;
    /// The message that tells the state.
    fn msg(namespace: String, id: u64, update: Update<Self::Value>) -> Msg;
}

/// One watcher's objects (a relist replaces them when it completes) and
/// the value last sent: it tells the state only when that changes or its
/// first list completes. An event that changes nothing that counts of its
/// object costs no recomputation.
#[derive(Default)]
pub(crate) struct Fold<K: Kind> {
    writer: Writer<K>,
    sent: K::Value,
    synced: bool,
}

impl<K: Kind> Fold<K> {
    /// Folds one watcher event in; the update for the state, or None when
    /// the value did not change and no first list completed.
    pub(crate) fn apply(&mut self, event: watcher::Event<K>) -> Option<Update<K::Value>> {
        let store = self.writer.as_reader();
        let counted = |obj: &K| {
            store
                .get(&ObjectRef::from_obj(obj))
                .and_then(|o| o.counts())
        };
        let touched = match &event {
            watcher::Event::Apply(obj) => counted(obj) != obj.counts(),
            watcher::Event::Delete(obj) => counted(obj).is_some(),
            watcher::Event::InitDone => true,
            watcher::Event::Init | watcher::Event::InitApply(_) => false,
        };
        self.writer.apply_watcher_event(&event);
        let first_list = matches!(event, watcher::Event::InitDone) && !self.synced;
        self.synced |= first_list;
        if !touched || !self.synced {
            return None;
        }
        let value = K::value(&store.state());
        let changed = value != self.sent;
        if changed {
            self.sent = value.clone();
        }
        (changed || first_list).then(|| Update {
            value: changed.then_some(value),
            first_list,
        })
    }
}

impl<F: Fn(&str, u64) -> Option<JoinHandle<()>> + Send> Spawn for F {
    fn spawn(&self, namespace: &str, id: u64) -> Option<JoinHandle<()>> {
        self(namespace, id)
    }
}

/// What starts the real watchers of `K` through the API server, each
/// sending its messages to `tx` and counting its errors in `metrics`.
pub(crate) fn spawner<K: Kind>(
    client: &kube::Client,
    tx: &UnboundedSender<Msg>,
    metrics: &ClusterMetrics,
) -> Box<dyn Spawn> {
    let (client, tx, metrics) = (client.clone(), tx.clone(), metrics.clone());
    Box::new(move |namespace: &str, id: u64| {
        let api = K::api(client.clone(), namespace);
        let (tx, metrics, ns) = (tx.clone(), metrics.clone(), namespace.to_string());
        let mut fold = Fold::<K>::default();
        Some(tokio::spawn(async move {
            // The cluster-scoped watch's key is "" (`priority_classes::CLUSTER`).
            let scope = if ns.is_empty() { "cluster" } else { &ns };
            let result = super::watch::Watch {
                source: K::SOURCE,
                scope,
                api,
                config: K::config(),
                tx,
                metrics,
                handle: |event| fold.apply(event).map(|u| K::msg(ns.clone(), id, u)),
            }
            .run()
            .await;
            if let Err(e) = result {
                tracing::debug!(source = K::SOURCE.label(), namespace = %scope, error = %crate::errors::Chain(&e), "watch ended");
            }
        }))
    })
}

/// One namespace's watcher (its value is kept in its task).
struct Watched {
    id: u64,
    task: Option<JoinHandle<()>>,
    synced: bool,
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// Every watch of one kind and the value per namespace.
pub(crate) struct NamespaceWatches<T> {
    /// What is watched, for the log (`HorizontalPodAutoscalers`).
    what: &'static str,
    spawner: Box<dyn Spawn>,
    next_id: u64,
    watched: BTreeMap<String, Watched>,
    /// Namespace -> value (non-default values only), for the snapshot.
    values: BTreeMap<String, T>,
}

impl<T: Default + PartialEq> NamespaceWatches<T> {
    pub(crate) fn new(what: &'static str, spawner: Box<dyn Spawn>) -> NamespaceWatches<T> {
        NamespaceWatches {
            what,
            spawner,
            next_id: 0,
            watched: BTreeMap::new(),
            values: BTreeMap::new(),
        }
    }

    /// Watches exactly `namespaces`: starts the missing watchers, stops
    /// the others. True when the published values changed.
    pub(crate) fn set<'a>(&mut self, namespaces: impl IntoIterator<Item = &'a String>) -> bool {
        let wanted: BTreeSet<&String> = namespaces.into_iter().collect();
        let (watched, valued) = (self.watched.len(), self.values.len());
        self.watched.retain(|ns, _| wanted.contains(ns));
        self.values.retain(|ns, _| wanted.contains(ns));
        let stopped = watched != self.watched.len();
        for ns in wanted {
            if !self.watched.contains_key(ns) {
                self.next_id += 1;
                tracing::info!(namespace = %ns, "watching {}", self.what);
                let (id, task) = (self.next_id, self.spawner.spawn(ns, self.next_id));
                let watched = Watched {
                    id,
                    task,
                    synced: false,
                };
                self.watched.insert(ns.clone(), watched);
            }
        }
        if stopped {
            let watches = self.watched.len();
            tracing::debug!(watches, "{} watches stopped", self.what);
        }
        valued != self.values.len()
    }

    /// True when every watched namespace has completed its first list.
    pub(crate) fn synced(&self) -> bool {
        self.watched.values().all(|w| w.synced)
    }

    /// True when `namespace` is watched and its first list completed.
    pub(crate) fn synced_in(&self, namespace: &str) -> bool {
        self.watched.get(namespace).is_some_and(|w| w.synced)
    }

    /// The values for the snapshot.
    pub(crate) fn values(&self) -> &BTreeMap<String, T> {
        &self.values
    }

    /// Applies one watcher's update; returns whether the values changed
    /// and whether this completed the namespace's first list.
    pub(crate) fn apply(&mut self, namespace: &str, id: u64, update: Update<T>) -> (bool, bool) {
        let Some(w) = self.watched.get_mut(namespace).filter(|w| w.id == id) else {
            return (false, false); // a stopped watcher's leftovers
        };
        w.synced |= update.first_list;
        let Some(value) = update.value else {
            return (false, update.first_list);
        };
        if value == T::default() {
            self.values.remove(namespace);
        } else {
            self.values.insert(namespace.to_string(), value);
        }
        (true, update.first_list)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) struct NoSpawn;
    impl Spawn for NoSpawn {
        fn spawn(&self, _: &str, _: u64) -> Option<JoinHandle<()>> {
            None
        }
    }

    fn update(value: Option<u32>, first_list: bool) -> Update<u32> {
        Update { value, first_list }
    }

    #[test]
    fn values_follow_the_namespaces_and_the_default_is_not_kept() {
        let mut w = NamespaceWatches::<u32>::new("things", Box::new(NoSpawn));
        let serving = "knative-serving".to_string();
        assert!(!w.set([&serving]));
        assert!(!w.synced());
        assert_eq!(w.apply(&serving, 1, update(Some(3), true)), (true, true));
        assert!(w.synced());
        assert_eq!(w.values()[&serving], 3);
        // Policy gone: watch stopped, value dropped.
        assert!(w.set([]));
        assert!(w.values().is_empty());
        // Back: a new watcher (id 2); the old one's leftovers are ignored.
        w.set([&serving]);
        assert_eq!(w.apply(&serving, 1, update(Some(4), false)), (false, false));
        assert!(w.values().is_empty());
        assert!(!w.synced());
        assert_eq!(w.apply(&serving, 2, update(None, true)), (false, true));
        assert!(w.synced());
        assert!(w.apply(&serving, 2, update(Some(5), false)).0);
        assert_eq!(w.values()[&serving], 5);
        // The default value is not kept.
        assert!(w.apply(&serving, 2, update(Some(0), false)).0);
        assert!(w.values().is_empty());
    }
}
