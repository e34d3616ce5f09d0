//! The in-memory policy snapshot that the request path reads.
//!
//! Sources (a policy file, the cluster watchers) build a new [`Snapshot`]
//! and publish it with [`PolicyStore::publish`]; handlers take a cheap
//! `Arc` with [`PolicyStore::load`] and never block or call the API server.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arc_swap::ArcSwap;
use serde_json::{Map, Value};

use crate::engine::{self, EngineError, Mutation};
use crate::policy::Policy;
use crate::scope::AllowedNamespaces;

/// Everything the engine needs, frozen at one point in time.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// The policy in force per target namespace.
    pub policies: BTreeMap<String, Arc<Policy>>,
    /// Per namespace: Deployment names targeted by a HorizontalPodAutoscaler.
    pub hpa_targets: BTreeMap<String, BTreeSet<String>>,
    /// Per namespace: the duration keys of `config-leader-election`
    /// ([`Context::leader_election`](engine::Context::leader_election); none in the file-policy mode).
    pub leader_election: BTreeMap<String, Map<String, Value>>,
    /// Per namespace: the PodDisruptionBudgets the reconciler did not
    /// create, name -> selector and budget fields (what makes a
    /// reconciliation of the namespace due; none in the file-policy mode).
    pub budgets: BTreeMap<String, BTreeMap<String, String>>,
    /// The PriorityClasses that exist ([`Context::priority_classes`](engine::Context::priority_classes)),
    /// once listed while a policy names one; None otherwise.
    pub priority_classes: Option<BTreeSet<String>>,
    /// True once every source has completed its first full sync.
    pub synced: bool,
    /// Where no policy object exists at all ([`Snapshot::unclaimed`]).
    pub unclaimed: Unclaimed,
}

/// The namespaces no policy object names at all: not one in force, nor
/// one that is invalid, in conflict, outside `--governed-namespaces` or
/// never valid. Where the serve option to undo is on (`--undo-unclaimed`),
/// the engine's records are undone there; by default a deleted policy
/// changes nothing (`restore` undoes). A policy object that exists but is
/// not in force never counts as none (undoing would lower HA behind a typo).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Unclaimed {
    /// Not known (the default; a source that cannot tell, e.g. a policy
    /// object whose target namespace cannot be read, or a policy file that
    /// cannot): no namespace.
    #[default]
    Unknown,
    /// Every namespace `governed` allows, except `claimed`: the target
    /// namespaces of every policy object.
    AllBut {
        claimed: BTreeSet<String>,
        governed: AllowedNamespaces,
    },
}

impl Unclaimed {
    /// Every namespace except `claimed` (any `--governed-namespaces`).
    pub fn all_but(claimed: impl IntoIterator<Item = String>) -> Unclaimed {
        Unclaimed::AllBut {
            claimed: claimed.into_iter().collect(),
            governed: AllowedNamespaces::all(),
        }
    }

    /// Only within `governed`.
    pub fn within(self, governed: &AllowedNamespaces) -> Unclaimed {
        match self {
            Unclaimed::AllBut { claimed, .. } => Unclaimed::AllBut {
                claimed,
                governed: governed.clone(),
            },
            Unclaimed::Unknown => Unclaimed::Unknown,
        }
    }

    fn contains(&self, namespace: &str) -> bool {
        match self {
            Unclaimed::Unknown => false,
            Unclaimed::AllBut { claimed, governed } => {
                governed.allows(namespace) && !claimed.contains(namespace)
            }
        }
    }
}

impl Snapshot {
    /// A synced snapshot holding the given policies (later ones for the same
    /// namespace replace earlier ones), and no other policy object: every
    /// other namespace is [`Snapshot::unclaimed`].
    pub fn from_policies(policies: impl IntoIterator<Item = Policy>) -> Snapshot {
        let policies: BTreeMap<String, Arc<Policy>> = policies
            .into_iter()
            .map(|p| (p.spec.target_namespace.clone(), Arc::new(p)))
            .collect();
        Snapshot {
            unclaimed: Unclaimed::all_but(policies.keys().cloned()),
            policies,
            hpa_targets: BTreeMap::new(),
            leader_election: BTreeMap::new(),
            budgets: BTreeMap::new(),
            priority_classes: None,
            synced: true,
        }
    }

    /// True when, once synced, no policy object names `namespace` at all
    /// ([`Unclaimed`]): with `--undo-unclaimed`, an object there carrying
    /// the engine's records gets them undone
    /// ([`engine::restore::undo_unclaimed`]).
    pub fn unclaimed(&self, namespace: &str) -> bool {
        self.synced && !self.policies.contains_key(namespace) && self.unclaimed.contains(namespace)
    }

    /// The policy governing `namespace`, if any.
    pub fn policy_for(&self, namespace: &str) -> Option<&Arc<Policy>> {
        self.policies.get(namespace)
    }

    /// What governs `namespace`, looked up once: the policy, the HPA
    /// targets and the `config-leader-election` data there. `None` when no policy governs it.
    pub fn governed(&self, namespace: &str) -> Option<NamespacePolicy<'_>> {
        Some(NamespacePolicy {
            policy: self.policy_for(namespace)?,
            facts: engine::Facts {
                hpa_targets: self.hpa_targets_in(namespace),
                leader_election: self.leader_election.get(namespace),
                priority_classes: self.priority_classes.as_ref(),
            },
        })
    }

    fn hpa_targets_in(&self, namespace: &str) -> &BTreeSet<String> {
        static NONE: BTreeSet<String> = BTreeSet::new();
        self.hpa_targets.get(namespace).unwrap_or(&NONE)
    }
}

/// A namespace some policy governs ([`Snapshot::governed`]).
#[derive(Clone, Copy, Debug)]
pub struct NamespacePolicy<'s> {
    pub policy: &'s Policy,
    pub facts: engine::Facts<'s>,
}

impl NamespacePolicy<'_> {
    /// The engine's answer for a CREATE or UPDATE of `object` in the
    /// governed `namespace`.
    pub fn mutate(&self, namespace: &str, object: &Value) -> Result<Mutation, EngineError> {
        engine::outcome(
            engine::Answering::Policy(self.policy, self.facts),
            namespace,
            object,
        )
        .map(|o| o.mutation)
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
