//! The reconciler's verdict in a policy's status ([`crate::findings`]): a
//! policy in force whose namespace the API server refuses the reconciler
//! (403 Forbidden on a list, get or patch) is not `Ready`, nor one that
//! changes nothing it targets there; what it governs, leaves alone and
//! overrides of the Knative Operator's goes into `status`.
//!
//! Only the replica holding the reconcile Lease knows. Every replica
//! writes status, so one that does not know keeps what the object says
//! when that is the reconciler's verdict on this generation (the replica
//! that knows wrote it), instead of writing `Ready=True` over it.

use super::merge::Verdict;
use super::status::{ObservedStatus, READY, ReadyStatus};
use crate::findings::{Coverage, Findings, Forbidden, Found, Refusal};

/// The `Ready` reason of a policy whose namespace the API server refuses
/// the reconciler.
pub const RECONCILER_FORBIDDEN: &str = "ReconcilerForbidden";

/// The `Ready` reason of a policy where a ResourceQuota of its namespace
/// refused the reconciler a write (a budget it creates, most often).
pub const QUOTA_EXCEEDED: &str = "QuotaExceeded";

/// The `Ready` reason of a policy whose namespace is being deleted.
pub const NAMESPACE_TERMINATING: &str = "NamespaceTerminating";

/// The `Ready` reason of a policy that changes nothing it targets: every
/// target in its namespace is left alone (opted out, excluded, or owned by
/// the Knative Operator while the policy sets `governOperatorOwned: false`).
pub const NOTHING_GOVERNED: &str = "NothingGoverned";

/// `desired` (the condition the policy's own verdict calls for), given
/// what the reconciler found in its namespace (`found`: the namespace
/// absent when this replica does not know, which leaves the coverage
/// fields alone). Only a policy in force ([`Verdict::Valid`]) changes: an
/// invalid or conflicting one already says `Ready=False` for its own reason.
pub fn with_findings(
    desired: ReadyStatus,
    verdict: &Verdict,
    found: &Findings,
    observed: &ObservedStatus,
) -> ReadyStatus {
    let Verdict::Valid { namespace } = verdict else {
        return desired;
    };
    match found.get(namespace) {
        Some(Found {
            forbidden: Some(forbidden),
            coverage,
        }) => ReadyStatus {
            status: "False",
            reason: match forbidden.why {
                Refusal::Rbac => RECONCILER_FORBIDDEN,
                Refusal::Quota(_) => QUOTA_EXCEEDED,
                Refusal::Terminating => NAMESPACE_TERMINATING,
            },
            message: message(namespace, forbidden),
            // What the pass counted stays true beside a refusal (a quota
            // refuses one write; the others went through).
            coverage: coverage.clone(),
            ..desired
        },
        Some(Found {
            forbidden: None,
            coverage: Some(coverage),
        }) if coverage.governs_nothing() => ReadyStatus {
            status: "False",
            reason: NOTHING_GOVERNED,
            message: nothing_governed(namespace, coverage),
            coverage: Some(coverage.clone()),
            ..desired
        },
        Some(Found { coverage, .. }) => ReadyStatus {
            coverage: coverage.clone(),
            ..desired
        },
        None => {
            let ours = [
                RECONCILER_FORBIDDEN,
                QUOTA_EXCEEDED,
                NAMESPACE_TERMINATING,
                NOTHING_GOVERNED,
            ];
            let kept = observed.ready.as_ref().filter(|r| {
                r.type_ == READY && r.observed_generation == desired.observed_generation
            });
            match kept.and_then(|r| Some((ours.into_iter().find(|o| *o == r.reason)?, r))) {
                Some((reason, ready)) => ReadyStatus {
                    status: "False",
                    reason,
                    message: ready.message.clone(),
                    ..desired
                },
                None => desired,
            }
        }
    }
}

/// What a policy that governs nothing leaves alone, and why.
fn nothing_governed(namespace: &str, coverage: &Coverage) -> String {
    let reasons: std::collections::BTreeSet<String> = coverage
        .left_alone
        .iter()
        .map(|u| u.why.to_string())
        .collect();
    format!(
        "the policy changes nothing in namespace {namespace}: all {} of its targets there are left \
         alone ({}); status.leftAlone names them",
        coverage.targets,
        Vec::from_iter(reasons).join("; "),
    )
}

/// What was refused, what it means and what fixes it.
fn message(namespace: &str, forbidden: &Forbidden) -> String {
    let (verb, resource) = (&forbidden.verb, &forbidden.resource);
    match &forbidden.why {
        Refusal::Quota(said) => format!(
            "a ResourceQuota in namespace {namespace} refused the reconciler's {verb} of \
             {resource} ({said}): that object is not brought in line, the others are. Raise \
             the quota (or free some of it); the next pass writes it"
        ),
        Refusal::Terminating => format!(
            "namespace {namespace} is being deleted: the API server refuses every new object \
             there (the reconciler's {verb} of {resource}); nothing more is written until it \
             is gone and re-created"
        ),
        Refusal::Rbac => format!(
            "the reconciler may not {verb} {resource} in namespace {namespace} (403 Forbidden): \
             the policy still applies to objects written from now on, but the objects already there \
             are not brought in line. Give the webhook's service account its rights there again: with \
             the chart's rbac.scope=namespaced, run `helm upgrade` of the release, which re-creates its \
             Roles and RoleBindings in {namespace} (deleting a namespace deletes them), or use \
             rbac.scope=cluster; a Deployment of your own named in the policy's workloads is patched \
             only when the chart's rbac.workloads lists it"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::standing::LeftAlone;
    use crate::findings::Untouched;
    use crate::sources::cluster::merge::Origin;
    use crate::sources::cluster::status::desired;
    use serde_json::json;

    fn valid() -> Verdict {
        Verdict::Valid {
            namespace: "knative-serving".into(),
        }
    }

    fn covering(targets: usize, left: usize) -> Found {
        let untouched = |i: usize| Untouched {
            kind: "Deployment",
            name: format!("d{i}"),
            why: LeftAlone::OperatorOwned("KnativeServing/knative-serving".into()),
        };
        Found {
            forbidden: None,
            coverage: Some(Coverage {
                targets,
                left_alone: (0..left).map(untouched).collect(),
                overrides: Vec::new(),
            }),
        }
    }

    fn observed(reason: &str, generation: i64) -> ObservedStatus {
        ObservedStatus::from_object(&json!({"status": {"observedGeneration": generation,
            "conditions": [{"type": "Ready", "status": "False", "reason": reason,
                "message": "written by the leader", "observedGeneration": generation,
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}))
    }

    fn ready(verdict: &Verdict, found: Option<Found>, seen: &ObservedStatus) -> ReadyStatus {
        let d = desired(verdict, Origin::Resource, Some(2));
        let found: Findings = found
            .map(|a| ("knative-serving".to_string(), a))
            .into_iter()
            .collect();
        with_findings(d, verdict, &found, seen)
    }

    /// A ResourceQuota used up and a namespace being deleted are 403s too,
    /// but no RBAC fix helps them: each has its own reason and advice.
    #[test]
    fn quota_and_a_terminating_namespace_are_not_read_as_missing_rights() {
        let refused = |why: Refusal| Found {
            forbidden: Some(Forbidden {
                verb: "create".into(),
                resource: "poddisruptionbudgets.policy".into(),
                why,
            }),
            coverage: None,
        };
        let seen = ObservedStatus::default();
        let quota = Refusal::Quota(
            "exceeded quota: pdbs, requested: count/poddisruptionbudgets.policy=1, used: count/poddisruptionbudgets.policy=2, limited: count/poddisruptionbudgets.policy=2".into(),
        );
        let r = ready(&valid(), Some(refused(quota)), &seen);
        assert_eq!((r.status, r.reason), ("False", QUOTA_EXCEEDED));
        assert!(r.message.contains("exceeded quota: pdbs"), "{}", r.message);
        assert!(r.message.contains("the others are"), "{}", r.message);
        assert!(
            !r.message.contains("  "),
            "one space between words: {}",
            r.message
        );
        assert!(!r.message.contains("helm upgrade"), "{}", r.message);
        let r = ready(&valid(), Some(refused(Refusal::Terminating)), &seen);
        assert_eq!((r.status, r.reason), ("False", NAMESPACE_TERMINATING));
        assert!(
            !r.message.contains("  "),
            "one space between words: {}",
            r.message
        );
        assert!(!r.message.contains("helm upgrade"), "{}", r.message);
    }

    #[test]
    fn a_refusal_makes_a_policy_in_force_not_ready_and_says_what_fixes_it() {
        let r = ready(
            &valid(),
            Some(Found::refused_list()),
            &ObservedStatus::default(),
        );
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
        let r = ready(
            &valid(),
            Some(Found::default()),
            &observed(RECONCILER_FORBIDDEN, 2),
        );
        assert_eq!((r.status, r.reason), ("True", "Valid"));
    }

    #[test]
    fn a_policy_that_leaves_every_target_alone_is_not_ready_and_says_why() {
        let r = ready(&valid(), Some(covering(14, 14)), &ObservedStatus::default());
        assert_eq!((r.status, r.reason), ("False", NOTHING_GOVERNED));
        assert!(
            r.message.contains("all 14 of its targets there are left alone (owned by the Knative Operator's KnativeServing/knative-serving"),
            "{}",
            r.message
        );
        let written = crate::sources::cluster::status::status_patch(
            &r,
            &ObservedStatus::default(),
            k8s_openapi::jiff::Timestamp::now(),
        );
        assert_eq!(written["status"]["governedObjects"], 14);
        assert_eq!(written["status"]["leftAlone"][0]["name"], "d0");
        // Some targets governed: in force, and the status still names the rest.
        let r = ready(&valid(), Some(covering(14, 2)), &ObservedStatus::default());
        assert_eq!((r.status, r.reason), ("True", "Valid"));
        assert_eq!(r.coverage.as_ref().map(|c| c.left_alone.len()), Some(2));
        // Each reason once, whatever the order of the objects.
        let mut mixed = covering(3, 3);
        if let Some(c) = mixed.coverage.as_mut() {
            c.left_alone[1].why = LeftAlone::OptedOut;
        }
        let r = ready(&valid(), Some(mixed), &ObservedStatus::default());
        assert_eq!(
            r.message.matches("owned by the Knative Operator").count(),
            1,
            "{}",
            r.message
        );
        assert_eq!(
            r.message.matches("opt-out label").count(),
            1,
            "{}",
            r.message
        );
        // No target yet (Knative not installed): in force.
        let r = ready(&valid(), Some(covering(0, 0)), &ObservedStatus::default());
        assert_eq!(r.reason, "Valid");
    }

    #[test]
    fn a_replica_that_does_not_know_keeps_the_leaders_verdict_of_this_generation() {
        for reason in [RECONCILER_FORBIDDEN, NOTHING_GOVERNED] {
            let seen = observed(reason, 2);
            let r = ready(&valid(), None, &seen);
            assert_eq!((r.status, r.reason), ("False", reason));
            assert_eq!(r.message, "written by the leader");
            assert!(seen.matches(&r), "nothing to write");
            // Of an older generation, or another reason: its own verdict.
            let r = ready(&valid(), None, &observed(reason, 1));
            assert_eq!(r.reason, "Valid");
        }
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
        let r = ready(
            &invalid,
            Some(Found::refused_list()),
            &ObservedStatus::default(),
        );
        assert_eq!((r.status, r.reason), ("False", "Invalid"));
    }
}
