//! What the reconciler's last pass over each governed namespace found
//! (what the API server refused, what the policy governs and leaves alone,
//! the Knative Operator's fields it overrides), handed to the cluster
//! source's policy status without either side knowing the other: the
//! reconciler writes ([`Board::set`]), the cluster source reads
//! ([`Board::subscribe`]).
//!
//! Only the replica holding the reconcile Lease runs passes, so only it
//! knows: a namespace without a verdict is not known here (another replica
//! may know), which is not the same as allowed.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::watch;

use crate::engine::standing::LeftAlone;
use crate::knative_operator::Override;

/// One request the API server refused with 403 Forbidden.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Forbidden {
    /// The verb refused: `list`, `get`, `patch`, `create` or `delete`.
    pub verb: String,
    /// The resource, as RBAC names it: `deployments.apps`, `configmaps`, ...
    pub resource: String,
    pub why: Refusal,
}

/// Why the API server answered 403 Forbidden: three causes that each need
/// their own fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// RBAC: the service account lacks the right.
    Rbac,
    /// A ResourceQuota of the namespace is used up (its message, which
    /// names the quota and the counts).
    Quota(String),
    /// The namespace is being deleted: nothing new may be created there.
    Terminating,
}

/// One target of the policy it leaves unchanged.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Untouched {
    pub kind: &'static str,
    pub name: String,
    pub why: LeftAlone,
}

/// What the policy of a namespace does with what is there, as a pass found it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    /// The policy's targets listed there (governed and left alone).
    pub targets: usize,
    /// The targets it leaves unchanged, and why.
    pub left_alone: Vec<Untouched>,
    /// The Knative Operator's fields (of a KnativeServing or KnativeEventing
    /// there) that the policy's values override.
    pub overrides: Vec<Override>,
}

impl Coverage {
    /// The policy changes nothing it targets: there are targets, and every
    /// one of them is left alone.
    pub fn governs_nothing(&self) -> bool {
        self.targets > 0 && self.left_alone.len() >= self.targets
    }
}

/// The verdict of the reconciler's last pass over one namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Found {
    /// The first request the API server refused there, if any.
    pub forbidden: Option<Forbidden>,
    /// What the policy governs there (None: the namespace could not be
    /// listed, or it has no policy).
    pub coverage: Option<Coverage>,
}

#[cfg(test)]
impl Found {
    /// A pass whose `list` of Deployments the API server refused.
    pub(crate) fn refused_list() -> Found {
        Found {
            forbidden: Some(Forbidden {
                verb: "list".into(),
                resource: "deployments.apps".into(),
                why: Refusal::Rbac,
            }),
            coverage: None,
        }
    }
}

/// Per namespace, the verdict of the reconciler's last pass there. A
/// namespace absent from the map is not known.
pub type Findings = BTreeMap<String, Found>;

/// The board the verdicts are published on; every clone is the same board.
#[derive(Clone, Debug, Default)]
pub struct Board {
    tx: Arc<watch::Sender<Findings>>,
}

impl Board {
    /// The verdict of a pass over `namespace`; subscribers wake only when
    /// it changes.
    pub fn set(&self, namespace: &str, verdict: Found) {
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

    pub fn get(&self, namespace: &str) -> Option<Found> {
        self.tx.borrow().get(namespace).cloned()
    }

    pub fn current(&self) -> Findings {
        self.tx.borrow().clone()
    }

    pub fn subscribe(&self) -> watch::Receiver<Findings> {
        self.tx.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscribers_wake_only_on_a_change() {
        let board = Board::default();
        let mut rx = board.subscribe();
        board.set("a", Found::refused_list());
        assert!(rx.has_changed().unwrap());
        rx.mark_unchanged();
        board.set("a", Found::refused_list());
        assert!(!rx.has_changed().unwrap(), "the same verdict again");
        board.set("a", Found::default());
        assert!(rx.has_changed().unwrap());
        rx.mark_unchanged();
        board.retain(&|_| true);
        assert!(!rx.has_changed().unwrap());
        board.retain(&|_| false);
        assert!(rx.has_changed().unwrap());
        assert!(board.current().is_empty(), "not known any more");
    }
}
