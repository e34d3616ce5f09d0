//! What the reconciler found it may do in each governed namespace: the
//! verdict of its last pass there, handed to whoever reports it (the
//! cluster source's `Ready` condition) without either side knowing the
//! other. The reconciler writes ([`Rights::set`]), the cluster source
//! reads ([`Rights::subscribe`]); the application wires one board into both.
//!
//! Only the replica holding the reconcile Lease runs passes, so only it
//! knows: a namespace without a verdict is not known here (another replica
//! may know), which is not the same as allowed.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::watch;

/// One request the API server refused with 403 Forbidden.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forbidden {
    /// The verb refused: `list`, `get` or `patch`.
    pub verb: String,
    /// The resource, as RBAC names it: `deployments.apps`, `configmaps`, ...
    pub resource: String,
}

/// Per namespace, the verdict of the reconciler's last pass there: `None`
/// when nothing was refused, else the first refusal. A namespace absent
/// from the map is not known.
pub type Verdicts = BTreeMap<String, Option<Forbidden>>;

/// The board the verdicts are published on. Cheap to clone; every clone is
/// the same board.
#[derive(Clone, Debug)]
pub struct Rights {
    tx: Arc<watch::Sender<Verdicts>>,
}

impl Default for Rights {
    fn default() -> Rights {
        Rights {
            tx: Arc::new(watch::Sender::new(Verdicts::new())),
        }
    }
}

impl Rights {
    /// The verdict of a pass over `namespace`; subscribers wake only when
    /// it changes.
    pub fn set(&self, namespace: &str, verdict: Option<Forbidden>) {
        self.tx.send_if_modified(|v| {
            if v.get(namespace) == Some(&verdict) {
                return false;
            }
            v.insert(namespace.to_string(), verdict);
            true
        });
    }

    /// Forgets the namespaces `keep` refuses (no longer governed), or all of
    /// them when this replica stops reconciling (it no longer knows).
    pub fn retain(&self, keep: &dyn Fn(&str) -> bool) {
        self.tx.send_if_modified(|v| {
            let before = v.len();
            v.retain(|ns, _| keep(ns));
            v.len() != before
        });
    }

    /// The verdicts now.
    pub fn current(&self) -> Verdicts {
        self.tx.borrow().clone()
    }

    /// A receiver that wakes on every change.
    pub fn subscribe(&self) -> watch::Receiver<Verdicts> {
        self.tx.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused() -> Option<Forbidden> {
        Some(Forbidden {
            verb: "list".into(),
            resource: "deployments.apps".into(),
        })
    }

    #[test]
    fn subscribers_wake_only_on_a_change() {
        let rights = Rights::default();
        let mut rx = rights.subscribe();
        rights.set("a", refused());
        assert!(rx.has_changed().unwrap());
        rx.mark_unchanged();
        rights.set("a", refused());
        assert!(!rx.has_changed().unwrap(), "the same verdict again");
        rights.set("a", None);
        assert!(rx.has_changed().unwrap());
        rx.mark_unchanged();
        rights.retain(&|_| true);
        assert!(!rx.has_changed().unwrap());
        rights.retain(&|_| false);
        assert!(rx.has_changed().unwrap());
        assert!(rights.current().is_empty(), "not known any more");
    }
}
