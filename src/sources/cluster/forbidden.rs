//! The reconciler's verdict in a policy's `Ready` condition: a policy in
//! force whose namespace the API server refuses the reconciler (403
//! Forbidden on a list, get or patch, [`crate::rights`]) is not `Ready`.
//!
//! Only the replica holding the reconcile Lease knows. Every replica
//! writes status, so one that does not know keeps what the object says
//! when that is the reconciler's verdict on this generation (the replica
//! that knows wrote it), instead of writing `Ready=True` over it.

use super::merge::Verdict;
use super::status::{ObservedStatus, READY, ReadyStatus};
use crate::rights::{Forbidden, Verdicts};

/// The `Ready` reason of a policy whose namespace the API server refuses
/// the reconciler.
pub const RECONCILER_FORBIDDEN: &str = "ReconcilerForbidden";

/// `desired` (the condition the policy's own verdict calls for), given
/// what the reconciler found in its namespace (`access`: the namespace
/// absent when this replica does not know, `None` when nothing was
/// refused).
/// Only a policy in force ([`Verdict::Valid`]) changes: an invalid or
/// conflicting one already says `Ready=False` for its own reason.
pub fn with_access(
    desired: ReadyStatus,
    verdict: &Verdict,
    access: &Verdicts,
    observed: &ObservedStatus,
) -> ReadyStatus {
    let Verdict::Valid { namespace } = verdict else {
        return desired;
    };
    match access.get(namespace) {
        Some(Some(forbidden)) => ReadyStatus {
            status: "False",
            reason: RECONCILER_FORBIDDEN,
            message: message(namespace, forbidden),
            ..desired
        },
        Some(None) => desired,
        None => match &observed.ready {
            Some(ready)
                if ready.reason == RECONCILER_FORBIDDEN
                    && ready.type_ == READY
                    && ready.observed_generation == desired.observed_generation =>
            {
                ReadyStatus {
                    status: "False",
                    reason: RECONCILER_FORBIDDEN,
                    message: ready.message.clone(),
                    ..desired
                }
            }
            _ => desired,
        },
    }
}

/// What was refused, what it means and what fixes it.
fn message(namespace: &str, forbidden: &Forbidden) -> String {
    format!(
        "the reconciler may not {verb} {resource} in namespace {namespace} (403 Forbidden): \
         the policy still applies to objects written from now on, but the objects already there \
         are not brought in line. Give the webhook's service account its rights there again: with \
         the chart's rbac.scope=namespaced, run `helm upgrade` of the release, which re-creates its \
         Roles and RoleBindings in {namespace} (deleting a namespace deletes them), or use \
         rbac.scope=cluster",
        verb = forbidden.verb,
        resource = forbidden.resource,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::cluster::merge::Origin;
    use crate::sources::cluster::status::desired;
    use serde_json::json;

    fn valid() -> Verdict {
        Verdict::Valid {
            namespace: "knative-serving".into(),
        }
    }

    fn refused() -> Option<Forbidden> {
        Some(Forbidden {
            verb: "list".into(),
            resource: "deployments.apps".into(),
        })
    }

    fn observed(reason: &str, generation: i64) -> ObservedStatus {
        ObservedStatus::from_object(&json!({"status": {"observedGeneration": generation,
            "conditions": [{"type": "Ready", "status": "False", "reason": reason,
                "message": "written by the leader", "observedGeneration": generation,
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}))
    }

    fn ready(
        verdict: &Verdict,
        access: Option<Option<Forbidden>>,
        seen: &ObservedStatus,
    ) -> ReadyStatus {
        let d = desired(verdict, Origin::Resource, Some(2));
        let access: Verdicts = access
            .map(|a| ("knative-serving".to_string(), a))
            .into_iter()
            .collect();
        with_access(d, verdict, &access, seen)
    }

    #[test]
    fn a_refusal_makes_a_policy_in_force_not_ready_and_says_what_fixes_it() {
        let r = ready(&valid(), Some(refused()), &ObservedStatus::default());
        assert_eq!((r.status, r.reason), ("False", RECONCILER_FORBIDDEN));
        assert_eq!(r.observed_generation, Some(2));
        for part in [
            "may not list deployments.apps in namespace knative-serving (403 Forbidden)",
            "helm upgrade",
            "rbac.scope=cluster",
        ] {
            assert!(r.message.contains(part), "{part}: {}", r.message);
        }
    }

    #[test]
    fn allowed_again_is_ready_again() {
        let r = ready(&valid(), Some(None), &observed(RECONCILER_FORBIDDEN, 2));
        assert_eq!((r.status, r.reason), ("True", "Valid"));
    }

    #[test]
    fn a_replica_that_does_not_know_keeps_the_leaders_verdict_of_this_generation() {
        let seen = observed(RECONCILER_FORBIDDEN, 2);
        let r = ready(&valid(), None, &seen);
        assert_eq!((r.status, r.reason), ("False", RECONCILER_FORBIDDEN));
        assert_eq!(r.message, "written by the leader");
        assert!(seen.matches(&r), "nothing to write");
        // Of an older generation, or another reason: its own verdict.
        let r = ready(&valid(), None, &observed(RECONCILER_FORBIDDEN, 1));
        assert_eq!(r.reason, "Valid");
        let r = ready(&valid(), None, &observed("Invalid", 2));
        assert_eq!(r.reason, "Valid");
    }

    #[test]
    fn an_invalid_policy_keeps_its_own_reason() {
        let invalid = Verdict::Invalid {
            message: "spec.replicas: too many".into(),
            kept: false,
            kept_generation: None,
            refusal: None,
        };
        let r = ready(&invalid, Some(refused()), &ObservedStatus::default());
        assert_eq!((r.status, r.reason), ("False", "Invalid"));
    }
}
