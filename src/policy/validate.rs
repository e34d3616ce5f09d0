//! Semantic validation of a HighAvailabilityPolicy spec. Every rule reports
//! the field path and the bad value; all violations are collected.

use std::collections::BTreeMap;

use super::disruption;
pub use super::disruption::parse_percent;
use super::duration::parse_go_duration;
pub use super::timing::{TimingRule, broken_timing_rules, format_ns};
use super::{
    DEFAULT_LEASE_DURATION, DEFAULT_RENEW_DEADLINE, DEFAULT_RETRY_PERIOD,
    HighAvailabilityPolicySpec, LeaderElection, PodAntiAffinity, PolicyError, TopologySpread,
    WorkloadOverride,
};

fn check_spread(path: &str, list: &[TopologySpread], errors: &mut Vec<PolicyError>) {
    if list.is_empty() {
        errors.push(PolicyError::invalid(
            path,
            "must not be empty (omit the field to leave Deployments as they are), got []",
        ));
    }
    let mut seen: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for (i, c) in list.iter().enumerate() {
        let key = &c.topology_key;
        if key.trim().is_empty() || key.chars().any(char::is_whitespace) {
            errors.push(PolicyError::invalid(
                format!("{path}[{i}].topologyKey"),
                format!("must be a non-empty node label key without spaces, got {key:?}"),
            ));
        }
        if let Some(skew) = c.max_skew
            && !(1..=100).contains(&skew)
        {
            errors.push(PolicyError::invalid(
                format!("{path}[{i}].maxSkew"),
                format!("must be between 1 and 100, got {skew}"),
            ));
        }
        let pair = (key.as_str(), c.when_unsatisfiable().as_str());
        if let Some(first) = seen.insert(pair, i) {
            errors.push(PolicyError::invalid(
                format!("{path}[{i}].topologyKey"),
                format!(
                    "duplicate constraint {key:?} with {} (already at {path}[{first}])",
                    pair.1
                ),
            ));
        }
    }
}

fn check_priority_class(path: &str, name: Option<&str>, errors: &mut Vec<PolicyError>) {
    if let Some(name) = name
        && !is_dns1123_subdomain(name)
    {
        errors.push(PolicyError::invalid(
            path,
            format!("must be a PriorityClass name (DNS-1123 subdomain), got {name:?}"),
        ));
    }
}

pub const MIN_REPLICAS: i32 = 1;
pub const MAX_REPLICAS: i32 = 100;
pub const MIN_BUCKETS: i32 = 1;
pub const MAX_BUCKETS: i32 = 10;

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
pub fn is_dns1123_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns1123_label)
}

fn check_replicas(path: &str, value: Option<i32>, errors: &mut Vec<PolicyError>) {
    if let Some(n) = value
        && !(MIN_REPLICAS..=MAX_REPLICAS).contains(&n)
    {
        errors.push(PolicyError::invalid(
            path,
            format!("must be between {MIN_REPLICAS} and {MAX_REPLICAS}, got {n}"),
        ));
    }
}

fn check_anti_affinity(path: &str, aa: &PodAntiAffinity, errors: &mut Vec<PolicyError>) {
    if let Some(key) = &aa.topology_key
        && (key.trim().is_empty() || key.chars().any(char::is_whitespace))
    {
        errors.push(PolicyError::invalid(
            format!("{path}.topologyKey"),
            format!("must be a non-empty node label key without spaces, got {key:?}"),
        ));
    }
}

/// Every semantic rule of a spec; returns all violations (empty = valid).
pub fn validate_spec(spec: &HighAvailabilityPolicySpec) -> Vec<PolicyError> {
    let mut check = SpecCheck {
        spec,
        disabled: spec
            .leader_election
            .as_ref()
            .is_some_and(|le| !le.is_enabled()),
        errors: Vec::new(),
    };
    check.target_namespace();
    check_replicas("spec.replicas", spec.replicas, &mut check.errors);
    if let Some(le) = &spec.leader_election {
        check.buckets(le);
        check.timings(le);
    }
    check.single_replica("spec.replicas", spec.replicas);
    check.global_placement();
    check_priority_class(
        "spec.priorityClassName",
        spec.priority_class_name.as_deref(),
        &mut check.errors,
    );
    for (i, w) in spec.workloads.iter().enumerate() {
        check.workload(i, w);
    }
    check.exclude();
    check.errors
}

/// One spec under validation: the rules of each part add to `errors`.
struct SpecCheck<'a> {
    spec: &'a HighAvailabilityPolicySpec,
    /// `leaderElection.enabled` is false.
    disabled: bool,
    errors: Vec<PolicyError>,
}

/// The three leader election durations: field name, value, Knative's default.
type Durations<'a> = [(&'static str, &'a Option<String>, &'static str); 3];

impl SpecCheck<'_> {
    fn target_namespace(&mut self) {
        if !is_dns1123_label(&self.spec.target_namespace) {
            self.errors.push(PolicyError::invalid(
                "spec.targetNamespace",
                format!(
                    "must be a valid namespace name (DNS-1123 label: lowercase letters, digits and '-', at most 63 characters), got {:?}",
                    self.spec.target_namespace
                ),
            ));
        }
    }

    fn buckets(&mut self, le: &LeaderElection) {
        let Some(b) = le.buckets else {
            return;
        };
        if !(MIN_BUCKETS..=MAX_BUCKETS).contains(&b) {
            self.errors.push(PolicyError::invalid(
                "spec.leaderElection.buckets",
                format!("must be between {MIN_BUCKETS} and {MAX_BUCKETS} (Knative rejects other values), got {b}"),
            ));
        } else if self.disabled && b != 1 {
            self.errors.push(PolicyError::invalid(
                "spec.leaderElection.buckets",
                format!("must be 1 (or unset) when enabled is false, got {b}"),
            ));
        }
    }

    /// Each duration parses and is positive; then client-go's ordering
    /// rules, reported at a duration the policy sets.
    fn timings(&mut self, le: &LeaderElection) {
        let durations: Durations = [
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
        let set = |i: usize| durations[i].1.is_some();
        let [Some(lease), Some(renew), Some(retry)] = parsed else {
            return;
        };
        for rule in broken_timing_rules(lease, renew, retry) {
            let (a, b) = rule.fields();
            if !(set(a) || set(b)) {
                continue;
            }
            let at = if set(a) { a } else { b };
            self.errors.push(PolicyError::invalid(
                format!("spec.leaderElection.{}", durations[at].0),
                rule.message(&shown(a), &shown(b), retry),
            ));
        }
    }

    /// One duration in nanoseconds, or `None` with the error recorded.
    fn duration(&mut self, field: &str, value: &Option<String>, default: &str) -> Option<u128> {
        let path = format!("spec.leaderElection.{field}");
        let text = value.as_deref().unwrap_or(default);
        match parse_go_duration(text) {
            Ok(0) => {
                self.errors.push(PolicyError::invalid(
                    path,
                    format!("must be a positive duration, got {text:?}"),
                ));
                None
            }
            Ok(ns) => Some(ns),
            Err(why) => {
                self.errors.push(PolicyError::invalid(
                    path,
                    format!(
                        "must be a Go duration such as \"60s\" or \"1m30s\" ({why}), got {text:?}"
                    ),
                ));
                None
            }
        }
    }

    /// With leader election disabled, more than one replica is an error.
    fn single_replica(&mut self, path: &str, replicas: Option<i32>) {
        if self.disabled
            && let Some(n) = replicas.filter(|n| *n > 1)
        {
            self.errors.push(PolicyError::invalid(
                path,
                format!("must be 1 (or unset) when leaderElection.enabled is false, got {n}"),
            ));
        }
    }

    /// Anti-affinity, spread constraints and PDB for every Deployment.
    fn global_placement(&mut self) {
        let spec = self.spec;
        if let Some(aa) = &spec.pod_anti_affinity {
            check_anti_affinity("spec.podAntiAffinity", aa, &mut self.errors);
        }
        if let Some(list) = &spec.topology_spread_constraints {
            check_spread("spec.topologySpreadConstraints", list, &mut self.errors);
        }
        if let Some(pdb) = &spec.pod_disruption_budget {
            let fewest = disruption::fewest_for_global(spec);
            disruption::check(
                "spec.podDisruptionBudget",
                pdb,
                fewest.as_ref(),
                &mut self.errors,
            );
        }
    }

    /// `spec.workloads[i]`: its name, then its overrides.
    fn workload(&mut self, i: usize, w: &WorkloadOverride) {
        let spec = self.spec;
        let path = format!("spec.workloads[{i}]");
        self.workload_name(i, &path, &w.name);
        check_replicas(&format!("{path}.replicas"), w.replicas, &mut self.errors);
        self.single_replica(&format!("{path}.replicas"), w.replicas);
        if let Some(n) = w.replicas
            && crate::knative::is_scaled_on_demand(&w.name)
        {
            self.errors.push(PolicyError::invalid(
                format!("{path}.replicas"),
                format!(
                    "{}, so this is never applied; remove it, got {n}",
                    disruption::on_demand(&w.name)
                ),
            ));
        }
        if let Some(aa) = &w.pod_anti_affinity {
            check_anti_affinity(&format!("{path}.podAntiAffinity"), aa, &mut self.errors);
        }
        check_priority_class(
            &format!("{path}.priorityClassName"),
            w.priority_class_name.as_deref(),
            &mut self.errors,
        );
        if let Some(pdb) = &w.pod_disruption_budget {
            let fewest = disruption::fewest_for_workload(spec, i);
            disruption::check(
                &format!("{path}.podDisruptionBudget"),
                pdb,
                fewest.as_ref(),
                &mut self.errors,
            );
        }
        if let Some(list) = &w.topology_spread_constraints {
            check_spread(
                &format!("{path}.topologySpreadConstraints"),
                list,
                &mut self.errors,
            );
        }
    }

    /// A Deployment name, named once and not also excluded (a repeat names
    /// the latest earlier entry).
    fn workload_name(&mut self, i: usize, path: &str, name: &str) {
        if !is_dns1123_subdomain(name) {
            self.errors.push(PolicyError::invalid(
                format!("{path}.name"),
                format!("must be a Deployment name (DNS-1123 subdomain), got {name:?}"),
            ));
        }
        if let Some(first) = self.spec.workloads[..i]
            .iter()
            .rposition(|w| w.name == name)
        {
            self.errors.push(PolicyError::invalid(
                format!("{path}.name"),
                format!("duplicate workload {name:?} (already at spec.workloads[{first}])"),
            ));
        }
        if self.spec.exclude.iter().any(|e| e == name) {
            self.errors.push(PolicyError::invalid(
                format!("{path}.name"),
                format!("{name:?} is also listed in spec.exclude"),
            ));
        }
    }

    fn exclude(&mut self) {
        for (i, name) in self.spec.exclude.iter().enumerate() {
            if !is_dns1123_subdomain(name) {
                self.errors.push(PolicyError::invalid(
                    format!("spec.exclude[{i}]"),
                    format!("must be a Deployment name (DNS-1123 subdomain), got {name:?}"),
                ));
            }
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
