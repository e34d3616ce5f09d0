//! `knative-ha-webhook check FILE...`: validates policy files in every form
//! a user writes or gets them (a HighAvailabilityPolicy document, a policy
//! ConfigMap with the document under data key `policy.yaml`, or a list of
//! them as `kubectl get -o yaml` prints it; see [`crate::policy::wrapped`])
//! and reports every error of every file in one run, each naming the file,
//! the document and the list item. Workload and exclude names that are not
//! Knative Deployments get a warning. Exit 0 when all are valid, 1
//! otherwise (`cmd::check`).

use std::path::PathBuf;

use crate::policy::names::{self, Unmatched};
use crate::policy::{self, DocumentRead, Policy, PolicyError};

/// A valid policy and where it came from.
struct Valid {
    policy: Policy,
    place: String,
    item: bool,
    configmap: Option<String>,
}

/// The outcome of one policy document: its policy, or its errors (each a line).
type Checked = Result<Valid, Vec<String>>;

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

fn lines(errors: Vec<PolicyError>, place: &str) -> Vec<String> {
    errors
        .iter()
        .flat_map(|e| e.flatten())
        .map(|e| format!("{place}: {e}"))
        .collect()
}

/// One policy document of `file`, as [`crate::policy::read_documents`]
/// read it.
fn check_read(file: &str, read: DocumentRead) -> Checked {
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
        Err(errors) => Err(lines(errors, &place)),
    }
}

/// Every policy document of one file.
fn check_text(file: &str, text: &str) -> Vec<Checked> {
    let documents = crate::policy::read_documents(text);
    let mut out: Vec<Checked> = documents
        .reads
        .into_iter()
        .map(|read| check_read(file, read))
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

fn warning(place: &str, u: &Unmatched) -> Line {
    let hint = u
        .suggestion
        .as_ref()
        .map(|s| format!(" (did you mean {s:?}?)"))
        .unwrap_or_default();
    Line::Warning(format!(
        "{place}: warning: {}: {:?} is not the name of a Knative Deployment{hint}",
        u.path, u.name
    ))
}

/// The warnings of a valid policy: what it would do that the user may not
/// mean (stranding anti-affinity, an excluded leader-elected Deployment,
/// raised replicas under Knative's blocking budgets, names that are not
/// Knative's Deployments or live in another namespace).
fn warnings(found: &Valid) -> Vec<Line> {
    let mut out = Vec::new();
    for (path, who, n, key) in crate::policy::placement::stranding(&found.policy.spec) {
        out.push(Line::Warning(format!(
            "{}: warning: {path}: Required anti-affinity on {key} with {n} replicas puts each replica of {who} in its own {key} domain: with {n} domains or fewer, a replica stays Pending when one is lost or drained, and every later rollout waits for it (a topologySpreadConstraints entry with DoNotSchedule keeps replicas apart without stranding them)",
            found.place
        )));
    }
    if found.policy.spec.leader_election.is_some() {
        out.extend(
            found
                .policy
                .spec
                .exclude
                .iter()
                .enumerate()
                .filter(|(_, n)| crate::knative::is_leader_elected(n))
                .map(|(i, n)| {
                    Line::Warning(format!(
                        "{}: warning: spec.exclude[{i}]: {n:?} runs Knative's leader election but is excluded, so it is not restarted when spec.leaderElection changes: it keeps reading the old settings until it restarts, and while its bucket count differs every key it reconciles has two leaders",
                        found.place
                    ))
                }),
        );
    }
    if let Some(n) = found.policy.spec.replicas.filter(|n| *n > 1)
        && found.policy.spec.pod_disruption_budget.is_none()
        && n < 5
    {
        out.push(Line::Warning(format!(
            "{}: warning: spec.replicas {n} without spec.podDisruptionBudget: the PodDisruptionBudgets Knative ships (minAvailable \"80%\") allow no voluntary disruption below 5 replicas, so every node drain would block; set spec.podDisruptionBudget (maxUnavailable: 1)",
            found.place
        )));
    }
    out.extend(
        crate::policy::reach::warnings(&found.policy.spec)
            .into_iter()
            .map(|w| Line::Warning(format!("{}: warning: {w}", found.place))),
    );
    out.extend(names::misplaced(&found.policy.spec).iter().map(|m| {
        Line::Warning(format!(
            "{}: warning: {}",
            found.place,
            m.message(&found.policy.spec.target_namespace)
        ))
    }));
    let known = names::knative_deployments();
    out.extend(
        names::unmatched(&found.policy.spec, &known)
            .iter()
            .map(|u| warning(&found.place, u)),
    );
    out
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
