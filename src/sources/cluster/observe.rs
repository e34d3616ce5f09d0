//! What the merged policy objects tell an operator after each change: the
//! log line of a new winner or verdict, and the per-source and per-verdict
//! gauges. Called by `state` after every merge; pure output, no decisions.

use std::collections::BTreeSet;

use prometheus_client::metrics::{family::Family, gauge::Gauge};

use super::merge::{Merged, Origin, PolicyObject, Verdict};
use super::metrics::{SourceLabel, StateLabel};
use super::{ClusterMetrics, Source};

/// Logs which object governs which namespace when that changes.
pub(super) fn log_winners(before: &Merged, after: &Merged) {
    let namespaces: BTreeSet<&String> = after.winners.keys().chain(before.winners.keys()).collect();
    for ns in namespaces {
        let was = before.winners.get(ns).map(|w| &w.1);
        let now = after.winners.get(ns).map(|w| &w.1);
        let changed = was != now
            || before.policies.get(ns).map(|p| &p.spec) != after.policies.get(ns).map(|p| &p.spec);
        if !changed {
            continue;
        }
        match now {
            Some(winner) => {
                tracing::info!(namespace = %ns, policy = %winner, "policy in force")
            }
            None => tracing::info!(namespace = %ns, "no policy in force any more"),
        }
    }
}

/// Sets the policies-in-force per source and the objects per verdict.
pub(super) fn count_policies(metrics: &ClusterMetrics, merged: &Merged) {
    let n = |count: usize| i64::try_from(count).unwrap_or(i64::MAX);
    for state in ["valid", "invalid", "conflict", "not_governed"] {
        let count = merged.verdicts.values().filter(|v| v.state() == state);
        let gauge = metrics.policy_status.get_or_create(&StateLabel { state });
        gauge.set(n(count.count()));
    }
    for (origin, source) in [
        (Origin::Resource, Source::Policies),
        (Origin::ConfigMap, Source::ConfigMaps),
    ] {
        let label = SourceLabel {
            source: source.label(),
        };
        let in_force = merged.winners.values().filter(|w| w.0 == origin).count();
        // Per object on its last valid version: whether this release refuses it in part.
        let on_last_valid: Vec<bool> = merged
            .verdicts
            .iter()
            .filter_map(|((o, _), v)| match v {
                Verdict::Invalid {
                    kept: true,
                    refusal,
                    ..
                } if *o == origin => Some(refusal.is_some()),
                _ => None,
            })
            .collect();
        let refused = on_last_valid.iter().filter(|r| **r).count();
        let set = |family: &Family<SourceLabel, Gauge>, count| {
            family.get_or_create(&label).set(n(count));
        };
        set(&metrics.policies, in_force);
        set(&metrics.on_last_valid, on_last_valid.len());
        set(&metrics.on_refused_last_valid, refused);
    }
}

/// The log line for a policy object whose verdict changed.
pub(super) fn log_verdict(obj: &PolicyObject, verdict: &Verdict) {
    match verdict {
        Verdict::Valid { namespace } => {
            tracing::info!(policy = %obj.display(), namespace = %namespace, "policy valid")
        }
        Verdict::Invalid {
            message,
            kept: true,
            kept_generation,
            refusal: Some(refusal),
        } => tracing::warn!(
            policy = %obj.display(),
            error = %message,
            last_valid_generation = kept_generation,
            last_valid_refused = %refusal.errors.join("; "),
            left_out = %refusal.left_out.join(", "),
            "policy invalid; its last valid version applies without the settings this release refuses; fix the policy"
        ),
        Verdict::Invalid {
            message,
            kept,
            kept_generation,
            ..
        } => tracing::warn!(
            policy = %obj.display(),
            error = %message,
            last_valid_kept = kept,
            last_valid_generation = kept_generation,
            "policy invalid; not applied"
        ),
        Verdict::Conflict { namespace, winner } => tracing::warn!(
            policy = %obj.display(),
            namespace = %namespace,
            winner = %winner,
            "policy in conflict; not applied"
        ),
        Verdict::NotGoverned {
            namespace,
            governed,
        } => tracing::warn!(
            policy = %obj.display(),
            namespace = %namespace,
            governed_namespaces = %governed,
            "policy for a namespace outside --governed-namespaces; not applied"
        ),
    }
}
