//! Workload and exclude names that name nothing: a policy's
//! `workloads[].name` and `exclude[]` are Deployment names, and one that
//! matches no Deployment (a typo such as `activtor`) silently applies to
//! nothing. [`unmatched`] finds them, with the nearest known name.

use std::collections::BTreeSet;

use super::HighAvailabilityPolicySpec;
use crate::knative;

/// A workload or exclude name that is a Knative Deployment of another of
/// Knative's namespaces than the policy's: the policy never meets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Misplaced {
    /// `spec.workloads[I].name` or `spec.exclude[I]`.
    pub path: String,
    pub name: String,
    /// Where Knative's release puts it.
    pub home: &'static str,
}

/// The workload and exclude names of `spec` that are Knative Deployments
/// of another of Knative's namespaces (judged only when `targetNamespace`
/// is one of them: Knative installed elsewhere is not).
pub fn misplaced(spec: &HighAvailabilityPolicySpec) -> Vec<Misplaced> {
    let target = spec.target_namespace.as_str();
    if !knative::namespaces().any(|n| n == target) {
        return Vec::new();
    }
    named(spec)
        .filter_map(|(path, name)| {
            let home = knative::home_namespace(name).filter(|h| *h != target)?;
            Some(Misplaced {
                path,
                name: name.clone(),
                home,
            })
        })
        .collect()
}

impl Misplaced {
    /// The warning text, after the place.
    pub fn message(&self, target: &str) -> String {
        format!(
            "{}: {:?} is a Knative Deployment of namespace {}, not of this policy's {target}: the policy never meets it (give {} a policy of its own)",
            self.path, self.name, self.home, self.home
        )
    }
}

/// The names of Knative's Deployments ([`knative::COMPONENTS`]) as a set.
pub fn knative_deployments() -> BTreeSet<String> {
    knative::names().map(str::to_string).collect()
}

/// A workload or exclude name that is not among the known names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unmatched {
    /// `spec.workloads[I].name` or `spec.exclude[I]`.
    pub path: String,
    pub name: String,
    /// The nearest known name, when it is close (at most 2 edits, fewer than
    /// half the name's length).
    pub suggestion: Option<String>,
}

/// Every Deployment name `spec` holds, with its field path, in the
/// policy's order: `workloads[].name`, then `exclude[]`.
fn named(spec: &HighAvailabilityPolicySpec) -> impl Iterator<Item = (String, &String)> {
    let workloads = spec.workloads.iter().map(|w| &w.name).enumerate();
    let excluded = spec.exclude.iter().enumerate();
    let workloads = workloads.map(|(i, name)| (format!("spec.workloads[{i}].name"), name));
    workloads.chain(excluded.map(|(i, name)| (format!("spec.exclude[{i}]"), name)))
}

/// The workload and exclude names of `spec` that are not in `known`, in
/// the policy's order.
pub fn unmatched(spec: &HighAvailabilityPolicySpec, known: &BTreeSet<String>) -> Vec<Unmatched> {
    named(spec)
        .filter(|(_, name)| !known.contains(*name))
        .map(|(path, name)| Unmatched {
            path,
            name: name.clone(),
            suggestion: nearest(name, known),
        })
        .collect()
}

/// The known name closest to `name` by edit distance, when it is close.
fn nearest(name: &str, known: &BTreeSet<String>) -> Option<String> {
    let limit = 2.min(name.chars().count().saturating_sub(1) / 2);
    known
        .iter()
        .map(|k| (distance(name, k), k))
        .filter(|(d, _)| *d <= limit)
        .min_by_key(|(d, _)| *d)
        .map(|(_, k)| k.clone())
}

/// Levenshtein distance (insertions, deletions, substitutions) over chars.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = if ca == *cb {
                diagonal
            } else {
                1 + diagonal.min(above).min(row[j])
            };
            diagonal = above;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(workloads: &[&str], exclude: &[&str]) -> HighAvailabilityPolicySpec {
        let workloads: Vec<serde_json::Value> = workloads
            .iter()
            .map(|n| serde_json::json!({ "name": n }))
            .collect();
        serde_json::from_value(serde_json::json!({
            "targetNamespace": "knative-serving",
            "workloads": workloads,
            "exclude": exclude,
        }))
        .unwrap()
    }

    #[test]
    fn typos_get_the_near_name_and_other_names_none() {
        let got = unmatched(
            &spec(
                &["activtor", "controller"],
                &["autoscaler-hpa", "mine", "webhok"],
            ),
            &knative_deployments(),
        );
        let shown: Vec<(&str, &str, Option<&str>)> = got
            .iter()
            .map(|u| (u.path.as_str(), u.name.as_str(), u.suggestion.as_deref()))
            .collect();
        assert_eq!(
            shown,
            [
                ("spec.workloads[0].name", "activtor", Some("activator")),
                ("spec.exclude[1]", "mine", None),
                ("spec.exclude[2]", "webhok", Some("webhook")),
            ]
        );
    }

    #[test]
    fn names_of_other_knative_namespaces_are_misplaced() {
        let got = misplaced(&spec(
            &["3scale-kourier-gateway", "activator"],
            &["imc-dispatcher", "mine"],
        ));
        let shown: Vec<(&str, &str, &str)> = got
            .iter()
            .map(|m| (m.path.as_str(), m.name.as_str(), m.home))
            .collect();
        assert_eq!(
            shown,
            [
                (
                    "spec.workloads[0].name",
                    "3scale-kourier-gateway",
                    "kourier-system"
                ),
                ("spec.exclude[0]", "imc-dispatcher", "knative-eventing"),
            ]
        );
        assert_eq!(
            got[0].message("knative-serving"),
            "spec.workloads[0].name: \"3scale-kourier-gateway\" is a Knative Deployment of namespace kourier-system, not of this policy's knative-serving: the policy never meets it (give kourier-system a policy of its own)"
        );
    }

    #[test]
    fn distance_counts_edits() {
        assert_eq!(distance("activtor", "activator"), 1);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(nearest("ab", &knative_deployments()), None);
    }
}
