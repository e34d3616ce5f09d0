//! Loading policies: one document (JSON value or YAML text) through the
//! schema check and the semantic rules, and multi-document files.

use std::collections::BTreeMap;

use super::{HighAvailabilityPolicy, Policy, PolicyError, Result, prune, validate, wrapped};

impl Policy {
    /// Validates a parsed resource: every semantic rule, all errors collected.
    pub fn from_resource(res: &HighAvailabilityPolicy) -> Result<Policy> {
        let name = res.metadata.name.clone().unwrap_or_default();
        let mut errors = validate::validate_spec(&res.spec);
        if name.is_empty() {
            let unnamed = PolicyError::invalid(["metadata", "name"], "required, got \"\"");
            errors.insert(0, unnamed);
        }
        if !errors.is_empty() {
            return Err(PolicyError::from_list(errors));
        }
        Ok(Policy {
            name,
            spec: res.spec.clone(),
        })
    }

    /// Parses and validates one policy given as a JSON value, with every
    /// error [`prune::check_all`] finds. Never panics.
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

/// The `spec.targetNamespace` a policy document names, valid or not (for
/// the namespaces a policy object claims even while it is invalid).
pub fn written_target(doc: &serde_json::Value) -> Option<String> {
    let target = doc.get("spec")?.get("targetNamespace")?.as_str()?;
    (!target.is_empty()).then(|| target.to_string())
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

/// One policy document of a file, read and checked: where it stands and
/// its policy, or every error of it (placed in its ConfigMap, not yet in
/// its item or document). `check` and the file source both read files so.
#[derive(Debug)]
pub struct DocumentRead {
    /// 1-based index of the YAML document in the file.
    pub index: usize,
    /// 1-based item, when the document is a list.
    pub item: Option<usize>,
    /// `NAMESPACE/NAME` of the policy ConfigMap the policy came in.
    pub configmap: Option<String>,
    pub outcome: std::result::Result<Policy, Vec<PolicyError>>,
}

impl DocumentRead {
    /// Where the document stands: `document N` or `document N, item M`.
    pub fn place(&self) -> String {
        match self.item {
            Some(item) => format!("document {}, item {item}", self.index),
            None => format!("document {}", self.index),
        }
    }

    /// An error of this document placed in its item and document.
    pub fn placed(&self, error: PolicyError) -> PolicyError {
        error.at(self.place())
    }
}

/// The policy documents of a file, read.
#[derive(Debug, Default)]
pub struct Documents {
    pub reads: Vec<DocumentRead>,
    /// The first YAML document that is an empty List (`kubectl get` of
    /// nothing), which holds no policy document.
    pub empty_list: Option<usize>,
}

/// Every policy document of a multi-document file, in order (see
/// [`wrapped`] for the forms), each checked by [`prune::check_all`].
pub fn read_documents(text: &str) -> Documents {
    let mut out = Documents::default();
    for doc in crate::yaml::documents(text) {
        let found = match crate::yaml::parse(&doc) {
            Ok(value) => {
                if wrapped::is_empty_list(&value) {
                    out.empty_list.get_or_insert(doc.index);
                }
                wrapped::unwrap(value)
            }
            Err(e) => vec![wrapped::Found {
                errors: vec![PolicyError::Yaml(e.to_string())],
                ..Default::default()
            }],
        };
        out.reads.extend(found.into_iter().map(|found| {
            let mut errors = found.errors.clone();
            let outcome = match found.document.as_ref().map(prune::check_all) {
                Some(Ok(policy)) if errors.is_empty() => Ok(policy),
                Some(Err(e)) => {
                    errors.extend(e.into_iter().map(|e| found.in_configmap(e)));
                    Err(errors)
                }
                _ => Err(errors),
            };
            DocumentRead {
                index: doc.index,
                item: found.item,
                configmap: found.configmap,
                outcome,
            }
        }));
    }
    out
}

/// One policy per target namespace: the policy claiming each namespace so
/// far, and where it was read.
#[derive(Debug, Default)]
pub struct Claims(BTreeMap<String, (String, String)>);

impl Claims {
    /// Claims `policy`'s target namespace for it, read at `place`; the
    /// error (for `spec.targetNamespace`) names the policy already there.
    pub fn claim(&mut self, policy: &Policy, place: &str) -> std::result::Result<(), String> {
        let ns = &policy.spec.target_namespace;
        if let Some((other, other_place)) = self.0.get(ns) {
            return Err(format!(
                "{ns:?} is already governed by policy {other:?} ({other_place}); one policy per namespace"
            ));
        }
        self.0
            .insert(ns.clone(), (policy.name.clone(), place.to_string()));
        Ok(())
    }
}

/// Parses a multi-document policy file ([`read_documents`]): every
/// document must hold valid policies, at most one per target namespace.
pub fn parse_policies(text: &str) -> Result<Vec<Policy>> {
    let (mut policies, mut claims) = (Vec::new(), Claims::default());
    let mut errors = Vec::new();
    for read in read_documents(text).reads {
        let policy = match &read.outcome {
            Ok(policy) => policy,
            Err(e) => {
                errors.push(read.placed(PolicyError::from_list(e.clone())));
                continue;
            }
        };
        match claims.claim(policy, &read.place()) {
            Err(e) => {
                errors.push(read.placed(PolicyError::invalid(["spec", "targetNamespace"], e)))
            }
            Ok(()) => policies.push(policy.clone()),
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

#[cfg(test)]
impl Policy {
    /// A valid policy `serving` for knative-serving whose spec is
    /// `targetNamespace` and then `spec` (YAML lines indented by two), for
    /// the unit tests.
    pub(crate) fn serving_with(spec: &str) -> Policy {
        let text = format!(
            "apiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\nmetadata: {{name: serving}}\nspec:\n  targetNamespace: knative-serving\n{spec}"
        );
        Policy::from_yaml(&text).expect("valid policy")
    }
}
