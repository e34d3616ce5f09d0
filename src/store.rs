//! Where the request path reads the current [`Snapshot`]: sources publish
//! each new one, and handlers take a cheap `Arc` of the current one without
//! blocking or calling the API server.

use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::engine::Snapshot;

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
