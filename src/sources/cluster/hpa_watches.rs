//! HPA watches, one per namespace with a policy in force (policies for
//! namespaces outside `--governed-namespaces` are never in force, so those
//! are never watched). Started and stopped by the state as policies come
//! and go. Each watcher folds its events into its namespace's
//! [`WatchTargets`] in its own task and sends the state an [`HpaUpdate`]
//! only when the targets change or its first list completes: the HPA
//! controller's status updates (most events) never wake the state task.
//!
//! A watcher that was stopped may still have messages in the channel:
//! every watcher gets an id and messages of an old id are dropped.

use std::collections::{BTreeMap, BTreeSet};

use kube::Api;
use kube::runtime::watcher;
use tokio::sync::mpsc::UnboundedSender;
use tokio::task::JoinHandle;

use super::hpas::{self, HpaRef, HpaUpdate, WatchTargets};
use super::{ClusterMetrics, Item, Msg, Source};

/// How the watchers are started (a client, or nothing in unit tests).
pub(crate) trait Spawn: Send {
    fn spawn(&self, namespace: &str, id: u64) -> Option<JoinHandle<()>>;
}

/// Starts real watchers through the API server.
pub(crate) struct KubeSpawner {
    pub client: kube::Client,
    pub tx: UnboundedSender<Msg>,
    pub metrics: ClusterMetrics,
}

impl Spawn for KubeSpawner {
    fn spawn(&self, namespace: &str, id: u64) -> Option<JoinHandle<()>> {
        let api: Api<HpaRef> = Api::namespaced(self.client.clone(), namespace);
        let tx = self.tx.clone();
        let metrics = self.metrics.clone();
        let ns = namespace.to_string();
        let mut seen = WatchTargets::default();
        Some(tokio::spawn(async move {
            let scope = ns.clone();
            let result = super::watch::Watch {
                source: Source::Hpas,
                scope: &scope,
                api,
                config: watcher::Config::default(),
                tx,
                metrics,
                convert: |hpa: HpaRef| {
                    let (key, target) = hpas::into_parts(hpa);
                    (key, Item::Hpa(target))
                },
                to_msg: move |change| {
                    let update = seen.apply(change)?;
                    Some(Msg::Hpa {
                        namespace: ns.clone(),
                        id,
                        update,
                    })
                },
            }
            .run()
            .await;
            if let Err(e) = result {
                tracing::debug!(namespace = %scope, error = %e, "HPA watch ended");
            }
        }))
    }
}

/// One namespace's watcher (its targets are kept in its task).
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

/// Every HPA watch and the targets per namespace.
pub(crate) struct HpaWatches {
    spawner: Box<dyn Spawn>,
    next_id: u64,
    watched: BTreeMap<String, Watched>,
    /// Namespace -> targeted Deployments (non-empty sets only), kept up to
    /// date per namespace for the snapshot.
    targets: BTreeMap<String, BTreeSet<String>>,
}

impl std::fmt::Debug for HpaWatches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HpaWatches")
            .field("watched", &self.watched)
            .finish()
    }
}

impl HpaWatches {
    pub(crate) fn new(spawner: Box<dyn Spawn>) -> HpaWatches {
        HpaWatches {
            spawner,
            next_id: 0,
            watched: BTreeMap::new(),
            targets: BTreeMap::new(),
        }
    }

    /// Watches exactly `namespaces`: starts the missing watchers, stops
    /// the others. True when the published targets changed.
    pub(crate) fn set<'a>(&mut self, namespaces: impl IntoIterator<Item = &'a String>) -> bool {
        let wanted: BTreeSet<&String> = namespaces.into_iter().collect();
        let before = self.watched.len();
        self.watched.retain(|ns, _| wanted.contains(ns));
        let stopped = before != self.watched.len();
        let removed = self.targets.len();
        self.targets.retain(|ns, _| wanted.contains(ns));
        let changed = removed != self.targets.len();
        for ns in wanted {
            if self.watched.contains_key(ns) {
                continue;
            }
            self.next_id += 1;
            let id = self.next_id;
            tracing::info!(namespace = %ns, "watching HorizontalPodAutoscalers");
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
            tracing::debug!(watches = self.watched.len(), "HPA watches stopped");
        }
        changed
    }

    /// True when every watched namespace has completed its first list.
    pub(crate) fn synced(&self) -> bool {
        self.watched.values().all(|w| w.synced)
    }

    /// The targets for the snapshot.
    pub(crate) fn targets(&self) -> &BTreeMap<String, BTreeSet<String>> {
        &self.targets
    }

    /// Namespaces watched now.
    pub(crate) fn namespaces(&self) -> impl Iterator<Item = &String> {
        self.watched.keys()
    }

    /// Applies one watcher's update; returns whether the targets changed
    /// and whether this completed the namespace's first list.
    pub(crate) fn apply(&mut self, namespace: &str, id: u64, update: HpaUpdate) -> (bool, bool) {
        let Some(w) = self.watched.get_mut(namespace).filter(|w| w.id == id) else {
            return (false, false); // a stopped watcher's leftovers
        };
        w.synced |= update.first_list;
        let Some(targets) = update.targets else {
            return (false, update.first_list);
        };
        if targets.is_empty() {
            self.targets.remove(namespace);
        } else {
            self.targets.insert(namespace.to_string(), targets);
        }
        (true, update.first_list)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::cluster::Change;
    use crate::sources::cluster::hpas::HpaTarget;

    struct NoSpawn;
    impl Spawn for NoSpawn {
        fn spawn(&self, _: &str, _: u64) -> Option<JoinHandle<()>> {
            None
        }
    }

    fn item(ns: &str, target: &str) -> Item {
        Item::Hpa(HpaTarget {
            namespace: ns.into(),
            deployment: Some(target.into()),
        })
    }

    /// One change through a watcher's fold and, when it sends anything,
    /// the state's watches: (targets changed, first list completed).
    fn feed(
        w: &mut HpaWatches,
        seen: &mut WatchTargets,
        ns: &str,
        id: u64,
        change: Change,
    ) -> (bool, bool) {
        match seen.apply(change) {
            Some(update) => w.apply(ns, id, update),
            None => (false, false),
        }
    }

    #[test]
    fn watches_follow_the_namespaces_and_stale_messages_are_dropped() {
        let mut w = HpaWatches::new(Box::new(NoSpawn));
        let serving = "knative-serving".to_string();
        assert!(!w.set([&serving]));
        assert!(!w.synced());
        let mut seen = WatchTargets::default();
        assert_eq!(
            seen.apply(Change::Init),
            None,
            "a list starts: nothing sent"
        );
        assert_eq!(
            seen.apply(Change::InitApply("a".into(), item(&serving, "activator"))),
            None,
            "a listed object: nothing sent"
        );
        assert_eq!(
            feed(&mut w, &mut seen, &serving, 1, Change::InitDone),
            (true, true)
        );
        assert!(w.synced());
        assert_eq!(w.targets()[&serving], ["activator".to_string()].into());
        // Same target again (a status update): the watcher sends nothing.
        assert_eq!(
            seen.apply(Change::Apply("a".into(), item(&serving, "activator"))),
            None
        );
        // Policy gone: watch stopped, targets dropped.
        assert!(w.set([]));
        assert!(w.targets().is_empty());
        // Back: a new watcher (id 2); the old one's leftovers are ignored.
        w.set([&serving]);
        let stale = seen.apply(Change::Apply("b".into(), item(&serving, "webhook")));
        assert!(stale.is_some(), "the old watcher saw a new target");
        assert_eq!(w.apply(&serving, 1, stale.unwrap()), (false, false));
        assert!(w.targets().is_empty());
        assert!(!w.synced());
        let mut seen = WatchTargets::default();
        seen.apply(Change::Init);
        assert_eq!(
            feed(&mut w, &mut seen, &serving, 2, Change::InitDone),
            (false, true)
        );
        assert!(w.synced());
        let apply_b = Change::Apply("b".into(), item(&serving, "webhook"));
        assert!(feed(&mut w, &mut seen, &serving, 2, apply_b).0);
        assert_eq!(w.targets()[&serving], ["webhook".to_string()].into());
        assert!(feed(&mut w, &mut seen, &serving, 2, Change::Delete("b".into())).0);
        assert!(w.targets().is_empty());
    }

    #[test]
    fn a_relist_sends_only_what_changed() {
        let ns = "knative-serving";
        let mut seen = WatchTargets::default();
        seen.apply(Change::Init);
        seen.apply(Change::InitApply("a".into(), item(ns, "activator")));
        let first = seen.apply(Change::InitDone).expect("first list");
        assert!(first.first_list);
        // A relist (after 410 Gone) with the same objects: nothing sent.
        seen.apply(Change::Init);
        seen.apply(Change::InitApply("a".into(), item(ns, "activator")));
        assert_eq!(seen.apply(Change::InitDone), None);
        // A relist that misses a deletion: the new targets, not a first list.
        seen.apply(Change::Init);
        assert_eq!(
            seen.apply(Change::InitDone),
            Some(HpaUpdate {
                targets: Some(BTreeSet::new()),
                first_list: false
            })
        );
    }
}
