//! `knative-ha-webhook check FILE...`: validates policy files in every form
//! a user writes or gets them (a HighAvailabilityPolicy document, a policy
//! ConfigMap with the document under data key `policy.yaml`, or a list of
//! them as `kubectl get -o yaml` prints it; see [`crate::policy::wrapped`])
//! and reports every error of every file in one run, each naming the file,
//! the document and the list item, and what a valid policy may not mean
//! as warnings.

use std::path::PathBuf;

use crate::policy::names;
use crate::policy::{self, Policy, PolicyError};

/// A valid policy and where it came from.
struct Valid {
    policy: Policy,
    place: String,
    item: bool,
    configmap: Option<String>,
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A valid document (standard output).
    Valid(String),
    /// A warning that does not make the file invalid (standard error).
    Warning(String),
    /// An error (standard error; the files are invalid).
    Error(String),
}

/// Every policy document of one file: its policy, or its errors (each a
/// line).
fn check_text(file: &str, text: &str) -> Vec<Result<Valid, Vec<String>>> {
    let documents = crate::policy::read_documents(text);
    let mut out: Vec<_> = documents
        .reads
        .into_iter()
        .map(|read| {
            let place = match read.item {
                Some(item) => format!("{file}: document {}, item {item}", read.index),
                None => format!("{file}: document {}", read.index),
            };
            match read.outcome {
                Ok(policy) => Ok(Valid {
                    policy,
                    place,
                    item: read.item.is_some(),
                    configmap: read.configmap,
                }),
                Err(errors) => Err(errors
                    .iter()
                    .flat_map(PolicyError::flatten)
                    .map(|e| format!("{place}: {e}"))
                    .collect()),
            }
        })
        .collect();
    if out.is_empty() {
        let why = documents
            .empty_list
            .map(|i| format!(" (document {i} is an empty List)"))
            .unwrap_or_default();
        out.push(Err(vec![format!("{file}: no policy document found{why}")]));
    }
    out
}

/// The warnings of a valid policy: what it would do that the user may not
/// mean (stranding anti-affinity, an excluded leader-elected Deployment,
/// raised replicas under Knative's blocking budgets, names that are not
/// Knative's Deployments or live in another namespace).
fn warnings(found: &Valid) -> Vec<Line> {
    let spec = &found.policy.spec;
    let mut texts = Vec::new();
    for (path, who, n, key) in crate::policy::placement::stranding(spec) {
        texts.push(format!(
            "{path}: Required anti-affinity on {key} with {n} replicas puts each replica of {who} in its own {key} domain: with {n} domains or fewer, a replica stays Pending when one is lost or drained, and every later rollout waits for it (a topologySpreadConstraints entry with DoNotSchedule keeps replicas apart without stranding them)"
        ));
    }
    for (i, n) in spec.exclude.iter().enumerate() {
        if spec.leader_election.is_some() && crate::knative::is_leader_elected(n) {
            texts.push(format!(
                "spec.exclude[{i}]: {n:?} runs Knative's leader election but is excluded, so it is not restarted when spec.leaderElection changes: it keeps reading the old settings until it restarts, and while its bucket count differs every key it reconciles has two leaders"
            ));
        }
    }
    if let Some(n) = spec.replicas.filter(|n| *n > 1)
        && spec.pod_disruption_budget.is_none()
        && n < 5
    {
        texts.push(format!(
            "spec.replicas {n} without spec.podDisruptionBudget: the PodDisruptionBudgets Knative ships (minAvailable \"80%\") allow no voluntary disruption below 5 replicas, so every node drain would block; set spec.podDisruptionBudget (maxUnavailable: 1)"
        ));
    }
    texts.extend(crate::policy::reach::warnings(spec));
    let misplaced = names::misplaced(spec);
    texts.extend(misplaced.iter().map(|m| m.message(&spec.target_namespace)));
    for u in names::unmatched(spec, &names::knative_deployments()) {
        let hint = u
            .suggestion
            .as_ref()
            .map(|s| format!(" (did you mean {s:?}?)"));
        texts.push(format!(
            "{}: {:?} is not the name of a Knative Deployment{}",
            u.path,
            u.name,
            hint.unwrap_or_default()
        ));
    }
    texts
        .into_iter()
        .map(|text| Line::Warning(format!("{}: warning: {text}", found.place)))
        .collect()
}

/// Checks every document of every file (`-`: standard input), in order,
/// across files too (one policy per target namespace). The files are
/// valid when no line is an error.
pub fn check_files(files: &[PathBuf]) -> Vec<Line> {
    let mut out = Vec::new();
    let mut claims = policy::Claims::default();
    for path in files {
        let (name, text) = match crate::manifest::read_input(path) {
            Ok(input) => input,
            Err(e) => {
                out.push(Line::Error(crate::errors::chain(&e)));
                continue;
            }
        };
        for checked in check_text(&name, &text) {
            let found = match checked {
                Ok(found) => found,
                Err(errors) => {
                    out.extend(errors.into_iter().map(Line::Error));
                    continue;
                }
            };
            let ns = &found.policy.spec.target_namespace;
            if let Err(e) = claims.claim(&found.policy, &found.place) {
                out.push(Line::Error(format!(
                    "{}: spec.targetNamespace: {e}",
                    found.place
                )));
                continue;
            }
            let from = found
                .configmap
                .as_ref()
                .map(|id| format!(", ConfigMap {id}"))
                .unwrap_or_default();
            let shown = if found.item { &found.place } else { &name };
            out.push(Line::Valid(format!(
                "{shown}: valid (policy {} for namespace {ns}{from})",
                found.policy.name
            )));
            out.extend(warnings(&found));
        }
    }
    out
}
