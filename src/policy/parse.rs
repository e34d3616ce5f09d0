//! Loading policies: one document (JSON value or YAML text) through the
//! schema check and the semantic rules, and multi-document files.

use super::{HighAvailabilityPolicy, Policy, PolicyError, Result, prune, validate, wrapped};

impl Policy {
    /// Validates a parsed resource: every semantic rule, all errors collected.
    pub fn from_resource(res: &HighAvailabilityPolicy) -> Result<Policy> {
        let mut errors = Vec::new();
        let name = res.metadata.name.clone().unwrap_or_default();
        if name.is_empty() {
            errors.push(PolicyError::invalid("metadata.name", "required, got \"\""));
        }
        errors.extend(validate::validate_spec(&res.spec));
        if errors.is_empty() {
            Ok(Policy {
                name,
                spec: res.spec.clone(),
            })
        } else {
            Err(PolicyError::from_list(errors))
        }
    }

    /// Parses and validates one policy given as a JSON value (as the cluster
    /// source receives it from the API server), with every error
    /// [`prune::check_all`] finds, as `check` and `/validate` report them.
    /// Unknown fields anywhere (except inside `metadata` and `status`) are
    /// errors. Never panics.
    pub fn from_json(value: &serde_json::Value) -> Result<Policy> {
        prune::check_all(value).map_err(PolicyError::from_list)
    }

    /// Parses and validates one YAML (or JSON) policy document.
    pub fn from_yaml(text: &str) -> Result<Policy> {
        let value: serde_json::Value =
            serde_saphyr::from_str(text).map_err(|e| PolicyError::Parse(e.to_string()))?;
        Policy::from_json(&value)
    }
}

/// The `spec.targetNamespace` a policy document names, valid or not (a
/// non-empty string); None when it names none (for the namespaces a policy
/// object claims even while it is invalid: `store::Unclaimed`).
pub fn written_target(doc: &serde_json::Value) -> Option<String> {
    let target = doc.get("spec")?.get("targetNamespace")?.as_str()?;
    (!target.is_empty()).then(|| target.to_string())
}

/// [`written_target`] of a YAML (or JSON) document.
pub fn written_target_yaml(text: &str) -> Option<String> {
    written_target(&serde_saphyr::from_str::<serde_json::Value>(text).ok()?)
}

/// Splits multi-document YAML into `(1-based index, text)` pairs, skipping
/// documents that hold only comments and blank lines. The index counts every
/// document, skipped or not, so it matches what a reader counts in the file.
pub fn split_documents(text: &str) -> Vec<(usize, String)> {
    crate::yaml::documents(text)
        .into_iter()
        .map(|doc| (doc.index, doc.text))
        .collect()
}

/// Parses a multi-document policy file: every non-empty document must be a
/// valid policy, a policy ConfigMap or a list of them (see [`wrapped`]).
/// Errors name the (1-based) document index, the list item and the
/// ConfigMap. Two policies for the same target namespace are an error.
pub fn parse_policies(text: &str) -> Result<Vec<Policy>> {
    let mut policies: Vec<Policy> = Vec::new();
    let mut errors = Vec::new();
    for (index, doc) in split_documents(text) {
        let in_doc = |error| PolicyError::Document {
            index,
            error: Box::new(error),
        };
        let value: serde_json::Value = match serde_saphyr::from_str(&doc) {
            Ok(value) => value,
            Err(e) => {
                errors.push(in_doc(PolicyError::Parse(e.to_string())));
                continue;
            }
        };
        for found in wrapped::unwrap(value) {
            errors.extend(
                found
                    .errors
                    .iter()
                    .cloned()
                    .map(|e| in_doc(found.at_item(e))),
            );
            let Some(document) = &found.document else {
                continue;
            };
            let policy = match Policy::from_json(document) {
                Ok(policy) if found.errors.is_empty() => policy,
                Ok(_) => continue,
                Err(e) => {
                    errors.push(in_doc(found.in_document(e)));
                    continue;
                }
            };
            let target = &policy.spec.target_namespace;
            match policies.iter().find(|p| &p.spec.target_namespace == target) {
                Some(other) => errors.push(in_doc(found.in_document(PolicyError::invalid(
                    "spec.targetNamespace",
                    format!(
                        "{target:?} is already governed by policy {:?}; one policy per namespace",
                        other.name
                    ),
                )))),
                None => policies.push(policy),
            }
        }
    }
    if !errors.is_empty() {
        return Err(PolicyError::from_list(errors));
    }
    if policies.is_empty() {
        return Err(PolicyError::Parse("no policy document found".into()));
    }
    Ok(policies)
}
