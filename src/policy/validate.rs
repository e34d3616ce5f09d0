//! Semantic validation of a HighAvailabilityPolicy spec. Every rule reports
//! the field path and the bad value; all violations are collected.

use std::collections::BTreeMap;

use super::disruption;
pub use super::disruption::parse_percent;
use super::duration::parse_go_duration;
pub use super::timing::{TimingRule, broken_timing_rules};
use super::{
    DEFAULT_LEASE_DURATION, DEFAULT_RENEW_DEADLINE, DEFAULT_RETRY_PERIOD,
    HighAvailabilityPolicySpec, LeaderElection, Path, PodAntiAffinity, PolicyError, TopologySpread,
    WorkloadOverride,
};

pub const MAX_REPLICAS: i32 = 100;
const MAX_BUCKETS: i32 = 10;

/// True for a DNS-1123 label (what a namespace name must be).
pub fn is_dns1123_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// True for a DNS-1123 subdomain (what a Deployment name must be).
fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

/// Every semantic rule of a spec; returns all violations (empty = valid).
pub fn validate_spec(spec: &HighAvailabilityPolicySpec) -> Vec<PolicyError> {
    let mut check = SpecCheck {
        spec,
        disabled: spec.leader_election_off(),
        errors: Vec::new(),
    };
    let root = Path::from(["spec"]);
    if !is_dns1123_label(&spec.target_namespace) {
        check.fail(
            root.key("targetNamespace"),
            format!(
                "must be a valid namespace name (DNS-1123 label: lowercase letters, digits and '-', at most 63 characters), got {:?}",
                spec.target_namespace
            ),
        );
    }
    check.within(root.key("replicas"), spec.replicas, MAX_REPLICAS);
    if let Some(le) = &spec.leader_election {
        check.buckets(le);
        check.timings(le);
    }
    check.single_replica(root.key("replicas"), spec.replicas);
    if let Some(PodAntiAffinity {
        topology_key: Some(key),
        ..
    }) = &spec.pod_anti_affinity
    {
        check.topology_key(root.key("podAntiAffinity").key("topologyKey"), key);
    }
    if let Some(list) = &spec.topology_spread_constraints {
        check.spread(root.key("topologySpreadConstraints"), list);
    }
    if let Some(pdb) = &spec.pod_disruption_budget {
        let fewest = disruption::fewest_for_global(spec);
        let path = root.key("podDisruptionBudget");
        check.errors.extend(disruption::check(&path, pdb, &fewest));
    }
    if let Some(name) = &spec.priority_class_name {
        check.subdomain(root.key("priorityClassName"), "PriorityClass", name);
    }
    for (i, w) in spec.workloads.iter().enumerate() {
        check.workload(root.key("workloads").index(i), i, w);
    }
    for (i, name) in spec.exclude.iter().enumerate() {
        check.subdomain(root.key("exclude").index(i), "Deployment", name);
    }
    check.errors
}

/// One spec under validation: the rules of each part add to `errors`.
struct SpecCheck<'a> {
    spec: &'a HighAvailabilityPolicySpec,
    /// `leaderElection.enabled` is false.
    disabled: bool,
    errors: Vec<PolicyError>,
}

impl SpecCheck<'_> {
    fn fail(&mut self, path: Path, message: impl Into<String>) {
        self.errors.push(PolicyError::invalid(path, message));
    }

    /// A count that must lie in `1..=max`.
    fn within(&mut self, path: Path, value: Option<i32>, max: i32) {
        if let Some(n) = value
            && !(1..=max).contains(&n)
        {
            self.fail(path, format!("must be between 1 and {max}, got {n}"));
        }
    }

    /// With leader election disabled, more than one replica is an error.
    fn single_replica(&mut self, path: Path, replicas: Option<i32>) {
        if self.disabled
            && let Some(n) = replicas.filter(|n| *n > 1)
        {
            self.fail(
                path,
                format!("must be 1 (or unset) when leaderElection.enabled is false, got {n}"),
            );
        }
    }

    /// A name that must be a DNS-1123 subdomain (`what`: the kind it names).
    fn subdomain(&mut self, path: Path, what: &str, name: &str) {
        if !is_dns1123_subdomain(name) {
            self.fail(
                path,
                format!("must be a {what} name (DNS-1123 subdomain), got {name:?}"),
            );
        }
    }

    fn topology_key(&mut self, path: Path, key: &str) {
        if key.trim().is_empty() || key.chars().any(char::is_whitespace) {
            self.fail(
                path,
                format!("must be a non-empty node label key without spaces, got {key:?}"),
            );
        }
    }

    fn spread(&mut self, path: Path, list: &[TopologySpread]) {
        if list.is_empty() {
            self.fail(
                path.clone(),
                "must not be empty (omit the field to leave Deployments as they are), got []",
            );
        }
        let mut seen: BTreeMap<(&str, &str), usize> = BTreeMap::new();
        for (i, c) in list.iter().enumerate() {
            let (at, key) = (path.index(i), &c.topology_key);
            self.topology_key(at.key("topologyKey"), key);
            self.within(at.key("maxSkew"), c.max_skew, 100);
            let pair = (key.as_str(), c.when_unsatisfiable().as_str());
            if let Some(first) = seen.insert(pair, i) {
                self.fail(
                    at.key("topologyKey"),
                    format!(
                        "duplicate constraint {key:?} with {} (already at {})",
                        pair.1,
                        path.index(first)
                    ),
                );
            }
        }
    }

    fn buckets(&mut self, le: &LeaderElection) {
        let path = Path::from(["spec", "leaderElection", "buckets"]);
        match le.buckets {
            Some(b) if !(1..=MAX_BUCKETS).contains(&b) => self.fail(
                path,
                format!(
                    "must be between 1 and {MAX_BUCKETS} (Knative rejects other values), got {b}"
                ),
            ),
            Some(b) if self.disabled && b != 1 => self.fail(
                path,
                format!("must be 1 (or unset) when enabled is false, got {b}"),
            ),
            _ => {}
        }
    }

    /// Each duration parses and is positive; then client-go's ordering
    /// rules, reported at a duration the policy sets.
    fn timings(&mut self, le: &LeaderElection) {
        // Field name, value, Knative's default.
        let durations = [
            ("leaseDuration", &le.lease_duration, DEFAULT_LEASE_DURATION),
            ("renewDeadline", &le.renew_deadline, DEFAULT_RENEW_DEADLINE),
            ("retryPeriod", &le.retry_period, DEFAULT_RETRY_PERIOD),
        ];
        let parsed = durations.map(|(field, value, default)| self.duration(field, value, default));
        let shown = |i: usize| -> String {
            let (field, value, default) = durations[i];
            match value {
                Some(v) => format!("{field} {v:?}"),
                None => format!("{field} (default {default:?})"),
            }
        };
        let [Some(lease), Some(renew), Some(retry)] = parsed else {
            return;
        };
        for rule in broken_timing_rules(lease, renew, retry) {
            let (a, b) = rule.fields();
            if let Some(at) = [a, b].into_iter().find(|&i| durations[i].1.is_some()) {
                self.fail(
                    Path::from(["spec", "leaderElection", durations[at].0]),
                    rule.message(&shown(a), &shown(b), retry),
                );
            }
        }
    }

    /// One duration in nanoseconds, or `None` with the error recorded.
    fn duration(&mut self, field: &str, value: &Option<String>, default: &str) -> Option<u128> {
        let path = Path::from(["spec", "leaderElection", field]);
        let text = value.as_deref().unwrap_or(default);
        match parse_go_duration(text) {
            Ok(0) => self.fail(path, format!("must be a positive duration, got {text:?}")),
            Ok(ns) => return Some(ns),
            Err(why) => self.fail(
                path,
                format!("must be a Go duration such as \"60s\" or \"1m30s\" ({why}), got {text:?}"),
            ),
        }
        None
    }

    /// `spec.workloads[i]`: its name, then its overrides.
    fn workload(&mut self, path: Path, i: usize, w: &WorkloadOverride) {
        self.workload_name(path.key("name"), i, &w.name);
        self.within(path.key("replicas"), w.replicas, MAX_REPLICAS);
        self.single_replica(path.key("replicas"), w.replicas);
        if let Some(n) = w.replicas
            && crate::knative::is_scaled_on_demand(&w.name)
        {
            self.fail(
                path.key("replicas"),
                format!(
                    "{}, so this is never applied; remove it, got {n}",
                    disruption::on_demand(&w.name)
                ),
            );
        }
        if let Some(PodAntiAffinity {
            topology_key: Some(key),
            ..
        }) = &w.pod_anti_affinity
        {
            self.topology_key(path.key("podAntiAffinity").key("topologyKey"), key);
        }
        if let Some(name) = &w.priority_class_name {
            self.subdomain(path.key("priorityClassName"), "PriorityClass", name);
        }
        if let Some(pdb) = &w.pod_disruption_budget {
            let fewest = disruption::replicas_at(self.spec, Some(i), &w.name);
            let path = path.key("podDisruptionBudget");
            self.errors.extend(disruption::check(&path, pdb, &fewest));
        }
        if let Some(list) = &w.topology_spread_constraints {
            self.spread(path.key("topologySpreadConstraints"), list);
        }
    }

    /// A Deployment name, named once and not also excluded (a repeat names
    /// the latest earlier entry).
    fn workload_name(&mut self, path: Path, i: usize, name: &str) {
        self.subdomain(path.clone(), "Deployment", name);
        let earlier = &self.spec.workloads[..i];
        if let Some(first) = earlier.iter().rposition(|w| w.name == name) {
            self.fail(
                path.clone(),
                format!("duplicate workload {name:?} (already at spec.workloads[{first}])"),
            );
        }
        if self.spec.exclude.iter().any(|e| e == name) {
            self.fail(path, format!("{name:?} is also listed in spec.exclude"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(name: &str) -> WorkloadOverride {
        WorkloadOverride {
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_repeated_workload_names_the_latest_earlier_entry() {
        let spec = HighAvailabilityPolicySpec {
            target_namespace: "knative-serving".into(),
            workloads: vec![
                workload("activator"),
                workload("activator"),
                workload("activator"),
            ],
            ..Default::default()
        };
        let messages: Vec<String> = validate_spec(&spec).iter().map(|e| e.to_string()).collect();
        assert_eq!(
            messages,
            [
                "spec.workloads[1].name: duplicate workload \"activator\" (already at spec.workloads[0])",
                "spec.workloads[2].name: duplicate workload \"activator\" (already at spec.workloads[1])",
            ]
        );
    }
}
