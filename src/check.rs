//! `knative-ha-webhook check FILE...`: validates policy files in either
//! form a user writes them (a HighAvailabilityPolicy document, or a policy
//! ConfigMap with the document under data key `policy.yaml`) and reports
//! every error of every file in one run, each naming the file and the
//! document. Exit 0 when all are valid, 1 otherwise (`cmd::check`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use crate::policy::objects::{self, POLICY_LABEL};
use crate::policy::{Policy, prune};
use crate::yaml;

/// A valid policy and where it came from.
struct Found {
    policy: Policy,
    place: String,
    configmap: Option<String>,
}

/// The outcome of one document: its policy, or its errors (each a line).
type Checked = Result<Found, Vec<String>>;

fn is_configmap(value: &Value) -> bool {
    value.get("apiVersion").and_then(Value::as_str) == Some("v1")
        && value.get("kind").and_then(Value::as_str) == Some("ConfigMap")
}

fn policy_errors(errors: Vec<crate::policy::PolicyError>, prefix: &str) -> Vec<String> {
    errors
        .iter()
        .flat_map(|e| e.flatten())
        .map(|e| format!("{prefix}{e}"))
        .collect()
}

/// A policy ConfigMap: labelled, with a valid policy under `policy.yaml`
/// (the messages of [`objects::check_configmap_data`], naming the ConfigMap).
fn check_configmap(cm: &Value) -> Result<(Policy, String), Vec<String>> {
    let meta = &cm["metadata"];
    let name = meta["name"].as_str().unwrap_or("");
    let ns = meta["namespace"].as_str().unwrap_or("");
    let id = if ns.is_empty() {
        name.to_string()
    } else {
        format!("{ns}/{name}")
    };
    let mut errors = Vec::new();
    if !objects::is_policy_configmap(cm) {
        errors.push(format!(
            "ConfigMap {id}: metadata.labels: missing {}={}; the webhook reads only ConfigMaps with that label",
            POLICY_LABEL.0, POLICY_LABEL.1
        ));
    }
    match objects::check_configmap_data(cm) {
        Ok(policy) if errors.is_empty() => Ok((policy, id)),
        Ok(_) => Err(errors),
        Err(lines) => {
            errors.extend(lines.into_iter().map(|l| format!("ConfigMap {id}: {l}")));
            Err(errors)
        }
    }
}

/// Every document of one file.
fn check_text(file: &str, text: &str) -> Vec<Checked> {
    let docs = yaml::documents(text);
    if docs.is_empty() {
        return vec![Err(vec![format!("{file}: no policy document found")])];
    }
    docs.iter()
        .map(|doc| {
            let place = format!("{file}: document {}", doc.index);
            let value =
                yaml::parse(doc).map_err(|e| vec![format!("{place}: invalid YAML: {e}")])?;
            let prefix = format!("{place}: ");
            if is_configmap(&value) {
                let (policy, id) = check_configmap(&value).map_err(|e| {
                    e.into_iter()
                        .map(|l| format!("{prefix}{l}"))
                        .collect::<Vec<_>>()
                })?;
                return Ok(Found {
                    policy,
                    place,
                    configmap: Some(id),
                });
            }
            let policy = prune::check_all(&value).map_err(|e| policy_errors(e, &prefix))?;
            Ok(Found {
                policy,
                place,
                configmap: None,
            })
        })
        .collect()
}

/// One line of the report: `Ok` for a valid document (standard output),
/// `Err` for an error (standard error).
pub type Line = Result<String, String>;

/// Checks every document of every file (`-`: standard input), in order,
/// across files too (one policy per target namespace). The files are
/// valid when no line is an error.
pub fn check_files(files: &[PathBuf]) -> Vec<Line> {
    let mut lines = Vec::new();
    // target namespace -> (policy name, place), across every file
    let mut governed: BTreeMap<String, (String, String)> = BTreeMap::new();
    for path in files {
        let (name, text) = match crate::manifest::read_input(path) {
            Ok(input) => input,
            Err(e) => {
                lines.push(Err(e.to_string()));
                continue;
            }
        };
        for checked in check_text(&name, &text) {
            let found = match checked {
                Ok(found) => found,
                Err(errors) => {
                    lines.extend(errors.into_iter().map(Err));
                    continue;
                }
            };
            let ns = &found.policy.spec.target_namespace;
            if let Some((other, other_place)) = governed.get(ns) {
                lines.push(Err(format!(
                    "{}: spec.targetNamespace: {ns:?} is already governed by policy {other:?} ({other_place}); one policy per namespace",
                    found.place
                )));
                continue;
            }
            governed.insert(ns.clone(), (found.policy.name.clone(), found.place.clone()));
            let from = found
                .configmap
                .map(|id| format!(", ConfigMap {id}"))
                .unwrap_or_default();
            lines.push(Ok(format!(
                "{name}: valid (policy {} for namespace {ns}{from})",
                found.policy.name
            )));
        }
    }
    lines
}
