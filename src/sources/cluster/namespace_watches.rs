//! Watches kept per namespace with a policy in force (policies for
//! namespaces outside `--governed-namespaces` are never in force, so those
//! are never watched): one watcher per namespace and per kind (HPAs,
//! `config-leader-election`), started and stopped by the state as policies
//! come and go. Each watcher folds its events into its namespace's value in
//! its own task and sends the state an [`Update`] only when the value
//! changes or its first list completes: the events that change nothing
//! (the HPA controller's status updates) never wake the state task.
//!
//! A watcher that was stopped may still have messages in the channel:
//! every watcher gets an id and messages of an old id are dropped.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;

use kube::runtime::watcher;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;

use super::{ClusterMetrics, Item, Msg, Source, WatchEvent};

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

/// Where a started watcher sends its messages and counts its errors.
#[derive(Clone)]
pub(crate) struct Sink {
    pub tx: UnboundedSender<Msg>,
    pub metrics: ClusterMetrics,
}

impl Sink {
    /// Starts one namespace's watcher of `source` in a task: `convert` as in
    /// [`super::watch::Watch`], `fold` keeps the namespace's value and says
    /// what to send (None: nothing).
    pub(crate) fn spawn<K, C, F>(
        &self,
        source: Source,
        namespace: &str,
        api: Api<K>,
        config: watcher::Config,
        convert: C,
        fold: F,
    ) -> JoinHandle<()>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
        C: Fn(K) -> (String, Item) + Send + 'static,
        F: FnMut(WatchEvent) -> Option<Msg> + Send + 'static,
    {
        let sink = self.clone();
        let scope = namespace.to_string();
        tokio::spawn(async move {
            let result = super::watch::Watch {
                source,
                scope: &scope,
                api,
                config,
                tx: sink.tx,
                metrics: sink.metrics,
                convert,
                to_msg: fold,
            }
            .run()
            .await;
            if let Err(e) = result {
                tracing::debug!(source = source.label(), namespace = %scope, error = %crate::errors::Chain(&e), "watch ended");
            }
        })
    }
}

/// One namespace's watcher (its value is kept in its task).
#[derive(Debug)]
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
    /// Namespace -> value (non-default values only), kept up to date per
    /// namespace for the snapshot.
    values: BTreeMap<String, T>,
}

impl<T> std::fmt::Debug for NamespaceWatches<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamespaceWatches")
            .field("what", &self.what)
            .field("watched", &self.watched)
            .finish()
    }
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
        let before = self.watched.len();
        self.watched.retain(|ns, _| wanted.contains(ns));
        let stopped = before != self.watched.len();
        let removed = self.values.len();
        self.values.retain(|ns, _| wanted.contains(ns));
        let changed = removed != self.values.len();
        for ns in wanted {
            if self.watched.contains_key(ns) {
                continue;
            }
            self.next_id += 1;
            let id = self.next_id;
            tracing::info!(namespace = %ns, "watching {}", self.what);
            let task = self.spawner.spawn(ns, id);
            self.watched.insert(
                ns.clone(),
                Watched {
                    id,
                    task,
                    synced: false,
                },
            );
        }
        if stopped {
            tracing::debug!(
                watches = self.watched.len(),
                "{} watches stopped",
                self.what
            );
        }
        changed
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

    /// Namespaces watched now.
    pub(crate) fn namespaces(&self) -> impl Iterator<Item = &String> {
        self.watched.keys()
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

/// A watcher's view of the objects of its scope by name, each reduced to
/// what counts of it (a PDB's selector and budget fields; nothing but its
/// name for a PriorityClass), kept in its task: it tells the state only
/// when that changes or its first list completes.
#[derive(Debug, Default)]
pub(crate) struct Keyed {
    objects: BTreeMap<String, String>,
    /// A relist in progress: what it listed so far.
    pending: Option<BTreeMap<String, String>>,
    synced: bool,
}

impl Keyed {
    /// Folds one watcher change in, `counts` saying what counts of an item
    /// (None: the object is left out); the update for the state, or None
    /// when nothing that counts changed and no first list completed.
    pub(crate) fn apply(
        &mut self,
        change: WatchEvent,
        counts: impl Fn(Item) -> Option<String>,
    ) -> Option<Update<BTreeMap<String, String>>> {
        let mut first_list = false;
        let next = match change {
            WatchEvent::Init => {
                self.pending = Some(BTreeMap::new());
                None
            }
            WatchEvent::InitApply(name, item) => {
                if let Some(c) = counts(item) {
                    self.pending
                        .get_or_insert_with(BTreeMap::new)
                        .insert(name, c);
                }
                None
            }
            WatchEvent::InitDone | WatchEvent::Missing => {
                first_list = !self.synced;
                self.synced = true;
                Some(self.pending.take().unwrap_or_default())
            }
            WatchEvent::Apply(name, item) => {
                let c = counts(item);
                if self.objects.get(&name) == c.as_ref() {
                    None
                } else {
                    let mut next = self.objects.clone();
                    match c {
                        Some(c) => next.insert(name, c),
                        None => next.remove(&name),
                    };
                    Some(next)
                }
            }
            WatchEvent::Delete(name) => self.objects.contains_key(&name).then(|| {
                let mut next = self.objects.clone();
                next.remove(&name);
                next
            }),
        };
        let changed = match next {
            Some(b) if b != self.objects => {
                self.objects = b;
                true
            }
            _ => false,
        };
        (changed || first_list).then(|| Update {
            value: changed.then(|| self.objects.clone()),
            first_list,
        })
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
