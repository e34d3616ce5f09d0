//! The in-memory policy snapshot that the request path reads.
//!
//! Sources (a policy file, the cluster watchers) build a new [`Snapshot`]
//! and publish it with [`PolicyStore::publish`]; handlers take a cheap
//! `Arc` with [`PolicyStore::load`] and never block or call the API server.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::engine::{self, Context, EngineError, Input, Mutation};
use crate::policy::Policy;

/// Everything the engine needs, frozen at one point in time.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// The policy in force per target namespace.
    pub policies: BTreeMap<String, Arc<Policy>>,
    /// Per namespace: Deployment names targeted by a HorizontalPodAutoscaler.
    pub hpa_targets: BTreeMap<String, BTreeSet<String>>,
    /// True once every source has completed its first full sync.
    pub synced: bool,
}

impl Snapshot {
    /// A synced snapshot holding the given policies (later ones for the same
    /// namespace replace earlier ones).
    pub fn from_policies(policies: impl IntoIterator<Item = Policy>) -> Snapshot {
        let policies = policies
            .into_iter()
            .map(|p| (p.spec.target_namespace.clone(), Arc::new(p)))
            .collect();
        Snapshot {
            policies,
            hpa_targets: BTreeMap::new(),
            synced: true,
        }
    }

    /// The policy governing `namespace`, if any.
    pub fn policy_for(&self, namespace: &str) -> Option<&Arc<Policy>> {
        self.policies.get(namespace)
    }

    /// Runs the engine for one object. `Ok(None)` means no policy governs
    /// the object's namespace.
    pub fn mutate(&self, input: &Input<'_>) -> Result<Option<Mutation>, EngineError> {
        let Some(policy) = self.policy_for(input.namespace) else {
            return Ok(None);
        };
        let ctx = Context {
            hpa_targets: self
                .hpa_targets
                .get(input.namespace)
                .cloned()
                .unwrap_or_default(),
        };
        engine::mutate(policy, input, &ctx).map(Some)
    }
}

/// A shared, atomically swapped snapshot. Cloning is cheap.
#[derive(Clone, Debug, Default)]
pub struct PolicyStore {
    inner: Arc<ArcSwap<Snapshot>>,
}

impl PolicyStore {
    pub fn new(initial: Snapshot) -> PolicyStore {
        PolicyStore {
            inner: Arc::new(ArcSwap::from_pointee(initial)),
        }
    }

    /// The current snapshot (lock-free).
    pub fn load(&self) -> Arc<Snapshot> {
        self.inner.load_full()
    }

    /// Replaces the snapshot.
    pub fn publish(&self, snapshot: Snapshot) {
        self.inner.store(Arc::new(snapshot));
    }

    /// Read-copy-update: derive the next snapshot from the current one.
    pub fn update(&self, f: impl Fn(&Snapshot) -> Snapshot) {
        self.inner.rcu(|cur| Arc::new(f(cur)));
    }
}
