//! HPA watches, one per namespace with a policy in force
//! ([`super::namespace_watches`]). Each watcher folds its events into its
//! namespace's [`WatchTargets`] in its own task and sends the state an
//! [`HpaUpdate`] only when the targets change or its first list completes:
//! the HPA controller's status updates (most events) never wake the state
//! task.

use std::collections::BTreeSet;

use kube::Api;
use kube::runtime::watcher;
use tokio::task::JoinHandle;

use super::hpas::{self, HpaRef, WatchTargets};
use super::namespace_watches::{NamespaceWatches, Sink, Spawn};
use super::{Item, Msg, Source};

/// Every HPA watch and the targets per namespace.
pub(crate) type HpaWatches = NamespaceWatches<BTreeSet<String>>;

/// What the HPA watches are logged as.
pub(crate) const WHAT: &str = "HorizontalPodAutoscalers";

/// Starts real HPA watchers through the API server.
pub(crate) struct KubeSpawner {
    pub client: kube::Client,
    pub sink: Sink,
}

impl Spawn for KubeSpawner {
    fn spawn(&self, namespace: &str, id: u64) -> Option<JoinHandle<()>> {
        let api: Api<HpaRef> = Api::namespaced(self.client.clone(), namespace);
        let ns = namespace.to_string();
        let mut seen = WatchTargets::default();
        Some(self.sink.spawn(
            Source::Hpas,
            namespace,
            api,
            watcher::Config::default(),
            |hpa: HpaRef| {
                let (key, target) = hpas::into_parts(hpa);
                (key, Item::Hpa(target))
            },
            move |change| {
                let update = seen.apply(change)?;
                Some(Msg::Hpa {
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
    use crate::sources::cluster::hpas::{HpaTarget, HpaUpdate};
    use crate::sources::cluster::namespace_watches::tests::NoSpawn;

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
        change: WatchEvent,
    ) -> (bool, bool) {
        match seen.apply(change) {
            Some(update) => w.apply(ns, id, update),
            None => (false, false),
        }
    }

    #[test]
    fn watches_follow_the_namespaces_and_stale_messages_are_dropped() {
        let mut w = HpaWatches::new(WHAT, Box::new(NoSpawn));
        let serving = "knative-serving".to_string();
        assert!(!w.set([&serving]));
        assert!(!w.synced());
        let mut seen = WatchTargets::default();
        assert_eq!(
            seen.apply(WatchEvent::Init),
            None,
            "a list starts: nothing sent"
        );
        assert_eq!(
            seen.apply(WatchEvent::InitApply(
                "a".into(),
                item(&serving, "activator")
            )),
            None,
            "a listed object: nothing sent"
        );
        assert_eq!(
            feed(&mut w, &mut seen, &serving, 1, WatchEvent::InitDone),
            (true, true)
        );
        assert!(w.synced());
        assert_eq!(w.values()[&serving], listed(&["activator"]));
        // Same target again (a status update): the watcher sends nothing.
        assert_eq!(
            seen.apply(WatchEvent::Apply("a".into(), item(&serving, "activator"))),
            None
        );
        // Policy gone: watch stopped, targets dropped.
        assert!(w.set([]));
        assert!(w.values().is_empty());
        // Back: a new watcher (id 2); the old one's leftovers are ignored.
        w.set([&serving]);
        let stale = seen.apply(WatchEvent::Apply("b".into(), item(&serving, "webhook")));
        assert!(stale.is_some(), "the old watcher saw a new target");
        assert_eq!(w.apply(&serving, 1, stale.unwrap()), (false, false));
        assert!(w.values().is_empty());
        assert!(!w.synced());
        let mut seen = WatchTargets::default();
        seen.apply(WatchEvent::Init);
        // An empty namespace, listed: the engine learns there is no HPA at all.
        assert_eq!(
            feed(&mut w, &mut seen, &serving, 2, WatchEvent::InitDone),
            (true, true)
        );
        assert_eq!(w.values()[&serving], listed(&[]));
        assert!(w.synced());
        let apply_b = WatchEvent::Apply("b".into(), item(&serving, "webhook"));
        assert!(feed(&mut w, &mut seen, &serving, 2, apply_b).0);
        assert_eq!(w.values()[&serving], listed(&["webhook"]));
        assert!(
            feed(
                &mut w,
                &mut seen,
                &serving,
                2,
                WatchEvent::Delete("b".into())
            )
            .0
        );
        assert_eq!(w.values()[&serving], listed(&[]));
    }

    /// What the state holds for a listed namespace: its targets and the
    /// mark that every HPA is known.
    fn listed(targets: &[&str]) -> BTreeSet<String> {
        targets
            .iter()
            .map(|t| t.to_string())
            .chain([crate::engine::HPAS_LISTED.to_string()])
            .collect()
    }

    #[test]
    fn a_relist_sends_only_what_changed() {
        let ns = "knative-serving";
        let mut seen = WatchTargets::default();
        seen.apply(WatchEvent::Init);
        seen.apply(WatchEvent::InitApply("a".into(), item(ns, "activator")));
        let first = seen.apply(WatchEvent::InitDone).expect("first list");
        assert!(first.first_list);
        // A relist (after 410 Gone) with the same objects: nothing sent.
        seen.apply(WatchEvent::Init);
        seen.apply(WatchEvent::InitApply("a".into(), item(ns, "activator")));
        assert_eq!(seen.apply(WatchEvent::InitDone), None);
        // A relist that misses a deletion: the new targets, not a first list.
        seen.apply(WatchEvent::Init);
        assert_eq!(
            seen.apply(WatchEvent::InitDone),
            Some(HpaUpdate {
                value: Some(listed(&[])),
                first_list: false
            })
        );
    }
}
