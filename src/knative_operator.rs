//! The Knative Operator's own high-availability settings against a
//! policy's: which fields of a `KnativeServing` or `KnativeEventing` the
//! policy overrides where both set them (the policy wins: the webhook
//! rewrites the Operator's writes at admission). The reconciler lists the
//! Operator's resources in each governed namespace and the policy's status
//! names these overrides (`status.operatorOverrides`).
//!
//! The fields are those the Operator's transformers write into what this
//! policy governs (knative/operator `pkg/reconciler/common`):
//! `spec.high-availability.replicas` (Deployments without an HPA, HPAs'
//! `minReplicas`), `spec.workloads[]` (`replicas`, `affinity`,
//! `topologySpreadConstraints`; `spec.deployments[]` in older versions),
//! `spec.podDisruptionBudgets[]` and `spec.config.leader-election`.

use std::fmt;

use serde_json::Value;

use crate::policy::{Policy, WorkloadOverride};

/// The Operator's API group.
pub const GROUP: &str = crate::engine::OPERATOR_API_GROUP;
/// The version of the Operator's resources the reconciler lists.
pub const VERSION: &str = "v1beta1";
/// [`GROUP`]/[`VERSION`].
pub const API_VERSION: &str = "operator.knative.dev/v1beta1";
/// The Operator's resources (kind, plural) that own Knative's objects.
pub const RESOURCES: [(&str, &str); 2] = [
    ("KnativeServing", "knativeservings"),
    ("KnativeEventing", "knativeeventings"),
];

/// One field both the Operator's resource and the policy set.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Override {
    /// `KnativeServing/name`.
    pub owner: String,
    /// The Operator's field, e.g. `spec.high-availability.replicas`.
    pub field: String,
    /// Its value there, as JSON text.
    pub theirs: String,
    /// The policy's field and value that win, e.g. `replicas 3`.
    pub ours: String,
}

impl fmt::Display for Override {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {}; the policy's {} wins",
            self.owner, self.field, self.theirs, self.ours
        )
    }
}

/// The fields of `resources` (KnativeServings and KnativeEventings) that
/// `policy` overrides, in their order.
pub fn overrides(policy: &Policy, resources: &[Value]) -> Vec<Override> {
    resources
        .iter()
        .flat_map(|r| overrides_of(policy, r))
        .collect()
}

/// The fields of one `resource` that `policy` overrides; none where the
/// policy leaves the Operator's objects alone (`governOperatorOwned: false`).
fn overrides_of(policy: &Policy, resource: &Value) -> Vec<Override> {
    if !policy.spec.governs_operator_owned() {
        return Vec::new();
    }
    let owner = format!(
        "{}/{}",
        resource["kind"].as_str().unwrap_or("?"),
        resource["metadata"]["name"].as_str().unwrap_or("?")
    );
    let spec = &resource["spec"];
    let mut out = Vec::new();
    let mut push = |field: String, theirs: &Value, ours: String| {
        out.push(Override {
            owner: owner.clone(),
            field,
            theirs: theirs.to_string(),
            ours,
        })
    };
    let ha = &spec["high-availability"]["replicas"];
    if let (Some(theirs), Some(ours)) = (ha.as_i64(), policy.spec.replicas)
        && theirs != i64::from(ours)
    {
        push(
            "spec.high-availability.replicas".into(),
            ha,
            format!("replicas {ours}"),
        );
    }
    for list in ["workloads", "deployments"] {
        for w in spec[list].as_array().into_iter().flatten() {
            let Some(name) = w["name"].as_str() else {
                continue;
            };
            if policy.spec.exclude.iter().any(|e| e == name) {
                continue;
            }
            let own = policy.spec.workloads.iter().find(|o| o.name == name);
            for (field, ours) in workload_fields(policy, own, w) {
                push(format!("spec.{list}[{name}].{field}"), &w[field], ours);
            }
        }
    }
    let budgets = spec["podDisruptionBudgets"].as_array();
    for b in budgets.into_iter().flatten() {
        let name = b["name"].as_str().unwrap_or("?");
        let deployment = name.strip_suffix("-pdb").unwrap_or(name);
        let own = policy.spec.workloads.iter().find(|o| o.name == deployment);
        let setting = own
            .and_then(|o| o.pod_disruption_budget.as_ref())
            .or(policy.spec.pod_disruption_budget.as_ref());
        if let Some(setting) = setting {
            let ours = serde_json::to_string(setting).unwrap_or_default();
            push(
                format!("spec.podDisruptionBudgets[{name}]"),
                b,
                format!("podDisruptionBudget {ours}"),
            );
        }
    }
    let config = &spec["config"];
    let le = config
        .get("leader-election")
        .or_else(|| config.get("config-leader-election"));
    if let (Some(le), Some(ours)) = (le, policy.spec.leader_election.as_ref()) {
        let ours_buckets = ours.buckets.map(|b| b.to_string());
        for (key, mine) in [
            ("buckets", ours_buckets.as_ref()),
            ("lease-duration", ours.lease_duration.as_ref()),
            ("renew-deadline", ours.renew_deadline.as_ref()),
            ("retry-period", ours.retry_period.as_ref()),
        ] {
            if let (Some(theirs), Some(mine)) = (le.get(key), mine)
                && theirs.as_str() != Some(mine.as_str())
            {
                push(
                    format!("spec.config.leader-election.{key}"),
                    theirs,
                    format!("leaderElection {key} {mine}"),
                );
            }
        }
    }
    out
}

/// The fields of one `workloads[]` entry the policy also sets: (the
/// Operator's field name, what the policy writes).
fn workload_fields(
    policy: &Policy,
    own: Option<&WorkloadOverride>,
    w: &Value,
) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let replicas = own.and_then(|o| o.replicas).or(policy.spec.replicas);
    if let (Some(theirs), Some(ours)) = (w["replicas"].as_i64(), replicas)
        && theirs != i64::from(ours)
    {
        out.push(("replicas", format!("replicas {ours}")));
    }
    let anti = own
        .and_then(|o| o.pod_anti_affinity.as_ref())
        .or(policy.spec.pod_anti_affinity.as_ref());
    if !w["affinity"].is_null()
        && let Some(anti) = anti
    {
        let ours = serde_json::to_string(anti).unwrap_or_default();
        out.push(("affinity", format!("podAntiAffinity {ours}")));
    }
    let spread = own
        .and_then(|o| o.topology_spread_constraints.as_ref())
        .or(policy.spec.topology_spread_constraints.as_ref());
    if !w["topologySpreadConstraints"].is_null() && spread.is_some() {
        out.push((
            "topologySpreadConstraints",
            "topologySpreadConstraints".to_string(),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(extra: &str) -> Policy {
        Policy::serving_with(&format!("  replicas: 3\n{extra}"))
    }

    fn serving(spec: Value) -> Value {
        json!({"apiVersion": "operator.knative.dev/v1beta1", "kind": "KnativeServing",
               "metadata": {"name": "knative-serving", "namespace": "knative-serving"}, "spec": spec})
    }

    #[test]
    fn the_api_version_is_the_group_and_version() {
        assert_eq!(API_VERSION, format!("{GROUP}/{VERSION}"));
    }

    #[test]
    fn names_each_field_both_set_and_not_the_others() {
        let p = policy(
            "  leaderElection: {buckets: 5}\n  podDisruptionBudget: {maxUnavailable: 1}\n  workloads:\n  - {name: activator, replicas: 5}\n",
        );
        let ks = serving(json!({
            "high-availability": {"replicas": 2},
            "workloads": [{"name": "activator", "replicas": 4}, {"name": "webhook", "replicas": 3}],
            "podDisruptionBudgets": [{"name": "activator-pdb", "minAvailable": "50%"}],
            "config": {"leader-election": {"buckets": "3", "lease-duration": "15s"}},
        }));
        let lines: Vec<String> = overrides(&p, std::slice::from_ref(&ks))
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            lines,
            [
                "KnativeServing/knative-serving spec.high-availability.replicas: 2; the policy's replicas 3 wins",
                "KnativeServing/knative-serving spec.workloads[activator].replicas: 4; the policy's replicas 5 wins",
                "KnativeServing/knative-serving spec.podDisruptionBudgets[activator-pdb]: {\"minAvailable\":\"50%\",\"name\":\"activator-pdb\"}; the policy's podDisruptionBudget {\"maxUnavailable\":1} wins",
                "KnativeServing/knative-serving spec.config.leader-election.buckets: \"3\"; the policy's leaderElection buckets 5 wins",
            ]
        );
        let same = serving(json!({"high-availability": {"replicas": 3}}));
        assert!(
            overrides(&p, &[same]).is_empty(),
            "equal values: no override"
        );
        let hands_off = policy("  governOperatorOwned: false\n");
        assert!(overrides(&hands_off, &[ks]).is_empty());
    }
}
