//! PriorityClasses (`scheduling.k8s.io/v1`, cluster-scoped), watched while
//! a policy in force names one: a Deployment whose pods name a PriorityClass
//! that does not exist can create no pod (the API server's Priority
//! admission refuses each), so a typo in the policy would roll every
//! governed Deployment onto pods that are never created. The engine holds
//! the name back, with a warning, where the class is known to be missing
//! ([`crate::engine::Facts::priority_classes`]). Only names are kept.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::Api;
use kube::runtime::watcher;
use tokio::task::JoinHandle;

use super::namespace_watches::{Keyed, NamespaceWatches, Sink, Spawn};
use super::{Item, Msg, Source};
use crate::policy::Policy;

/// The one watch (its scope key is [`CLUSTER`]): name -> "".
pub(crate) type PriorityClassWatches = NamespaceWatches<BTreeMap<String, String>>;

/// What these watches are logged as.
pub(crate) const WHAT: &str = "PriorityClasses";

/// The scope key of the one watch: PriorityClasses belong to no namespace.
pub(crate) const CLUSTER: &str = "";

/// What counts of a watched PriorityClass: that it is there.
pub(crate) fn counts(item: Item) -> Option<String> {
    matches!(item, Item::PriorityClass).then(String::new)
}

/// Whether any of `policies` names a PriorityClass (only then is the
/// cluster's list watched).
pub(crate) fn named<'a>(mut policies: impl Iterator<Item = &'a Policy>) -> bool {
    policies.any(|p| p.spec.priority_classes().next().is_some())
}

/// The PriorityClasses that exist, once the watch has listed them (None:
/// not known, or not watched).
pub(crate) fn known(watches: &PriorityClassWatches) -> Option<BTreeSet<String>> {
    watches.synced_in(CLUSTER).then(|| {
        watches
            .values()
            .get(CLUSTER)
            .map(|names| names.keys().cloned().collect())
            .unwrap_or_default()
    })
}

/// Starts the real watcher through the API server.
pub(crate) struct KubeSpawner {
    pub client: kube::Client,
    pub sink: Sink,
}

impl Spawn for KubeSpawner {
    fn spawn(&self, _: &str, id: u64) -> Option<JoinHandle<()>> {
        let api: Api<PriorityClass> = Api::all(self.client.clone());
        let mut seen = Keyed::default();
        Some(self.sink.spawn(
            Source::PriorityClasses,
            "cluster",
            api,
            watcher::Config::default(),
            |pc: PriorityClass| (pc.metadata.name.unwrap_or_default(), Item::PriorityClass),
            move |change| {
                let update = seen.apply(change, counts)?;
                Some(Msg::PriorityClasses { id, update })
            },
        ))
    }
}
