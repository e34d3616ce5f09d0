//! What one object's reconciliation came to ([`Reconciled`])
//! and the pieces of a run that need no API server: the change lines of
//! a drift and what the engine knows of a namespace.

use std::collections::BTreeSet;

use super::objects;
use super::plan::Drift;
use super::report::ObjectResult;
use crate::engine::Snapshot;
use crate::policy::Policy;

/// What happened to one object, and whether it still differs from its policy.
pub(super) struct Reconciled {
    pub(super) result: ObjectResult,
    pub(super) drift_left: bool,
}

impl Reconciled {
    /// Nothing left to do for the object.
    pub(super) fn settled(result: ObjectResult) -> Reconciled {
        Reconciled {
            result,
            drift_left: false,
        }
    }

    /// The object still differs from its policy.
    pub(super) fn drifting(result: ObjectResult) -> Reconciled {
        Reconciled {
            result,
            drift_left: true,
        }
    }

    pub(super) fn failed(error: &(dyn std::error::Error + 'static)) -> Reconciled {
        Reconciled::failed_because(crate::errors::chain(error))
    }

    pub(super) fn failed_because(reason: String) -> Reconciled {
        Reconciled::drifting(ObjectResult::Failed { error: reason })
    }
}

/// Every change on one line, pod template changes marked.
pub(super) fn changes_text(d: &Drift) -> String {
    d.changes
        .iter()
        .map(|c| {
            if c.rolls_pods {
                format!("{} (rolls pods)", c.change)
            } else {
                c.change.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// What the engine knows of `namespace`: its policy, the HPA targets
/// listed now and those in the server's snapshot, `config-leader-election`
/// as listed now.
pub(super) fn known_in(
    namespace: &str,
    policy: Option<&Policy>,
    snapshot_targets: Option<&BTreeSet<String>>,
    listed: &objects::Listed,
) -> Snapshot {
    let mut hpa_targets = listed.hpa_targets.clone();
    if let Some(t) = snapshot_targets {
        hpa_targets.extend(t.iter().cloned());
    }
    Snapshot::from_policies(policy.cloned()).knowing(
        namespace,
        hpa_targets,
        listed.leader_election.clone(),
    )
}
