//! What the engine answers from ([`Snapshot`]): the policy in force per
//! namespace and what the cluster is known to hold there. The server's
//! sources publish one ([`crate::store::PolicyStore`]); `preview`, `audit`,
//! the reconciler and `restore` build theirs from what they read.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::{Map, Value};

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
    /// ([`Facts::leader_election`]; none in the file-policy mode).
    pub leader_election: BTreeMap<String, Map<String, Value>>,
    /// Per namespace: the PodDisruptionBudgets the reconciler did not
    /// create, name -> selector and budget fields (what makes a
    /// reconciliation of the namespace due; none in the file-policy mode).
    pub budgets: BTreeMap<String, BTreeMap<String, String>>,
    /// The PriorityClasses that exist ([`Facts::priority_classes`]),
    /// once listed while a policy names one; None otherwise.
    pub priority_classes: Option<BTreeSet<String>>,
    /// True once every source has completed its first full sync.
    pub synced: bool,
    /// Where no policy object exists at all ([`Snapshot::unclaimed`]).
    pub unclaimed: Unclaimed,
}

/// The namespaces no policy object names at all, in force or not (undoing
/// the records where one is invalid would lower HA behind a typo): only
/// with `--undo-unclaimed` are the engine's records undone there.
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
            synced: true,
            ..Snapshot::default()
        }
    }

    /// This snapshot, knowing `hpa_targets` and `leader_election` (the
    /// `config-leader-election` data) in `namespace`: what a listing found.
    pub fn knowing(
        mut self,
        namespace: &str,
        hpa_targets: BTreeSet<String>,
        leader_election: Option<Map<String, Value>>,
    ) -> Snapshot {
        self.hpa_targets.insert(namespace.to_string(), hpa_targets);
        if let Some(data) = leader_election {
            self.leader_election.insert(namespace.to_string(), data);
        }
        self
    }

    /// True when, once synced, no policy object names `namespace` at all
    /// ([`Unclaimed`]).
    pub fn unclaimed(&self, namespace: &str) -> bool {
        self.synced && !self.policies.contains_key(namespace) && self.unclaimed.contains(namespace)
    }

    /// The policy governing `namespace`, if any.
    pub fn policy_for(&self, namespace: &str) -> Option<&Arc<Policy>> {
        self.policies.get(namespace)
    }

    /// What is known in `namespace` besides its policy.
    pub fn facts(&self, namespace: &str) -> Facts<'_> {
        static NONE: BTreeSet<String> = BTreeSet::new();
        Facts {
            hpa_targets: self.hpa_targets.get(namespace).unwrap_or(&NONE),
            leader_election: self.leader_election.get(namespace),
            priority_classes: self.priority_classes.as_ref(),
        }
    }
}

/// What a [`Snapshot`] knows of one namespace, borrowed.
#[derive(Clone, Copy, Debug)]
pub struct Facts<'a> {
    /// Deployment names some HorizontalPodAutoscaler targets there (besides
    /// the built-in Knative HPA-backed names), as [`super::hpa_target_entry`]
    /// writes them; [`super::HPAS_LISTED`] when every HPA is listed.
    pub hpa_targets: &'a BTreeSet<String>,
    /// What [`super::configmap::context_data`] holds of
    /// `config-leader-election` there: a leader-elected Deployment's hash
    /// follows what Knative reads, without the durations the ConfigMap
    /// holds back.
    pub leader_election: Option<&'a Map<String, Value>>,
    /// The PriorityClasses that exist, when known: a policy's
    /// `priorityClassName` missing from them is held back.
    pub priority_classes: Option<&'a BTreeSet<String>>,
}
