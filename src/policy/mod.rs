//! The HighAvailabilityPolicy model (one format for a file, a ConfigMap and
//! the custom resource) and its validation.
//!
//! `HighAvailabilityPolicy` is what users write; [`Policy`] is the validated,
//! normalised form the engine consumes. Only [`Policy`] values that passed
//! [`Policy::from_resource`] (or [`Policy::from_json`] / [`Policy::from_yaml`] /
//! [`parse_policies`], or [`recorded::recorded`] for a recorded last valid
//! spec) ever reach the engine.
//!
//! Parsing goes through `serde_json::Value` first: the document is checked
//! against the CRD's own `openAPIV3Schema` (unknown fields, types, bounds,
//! enums; see [`schema_check`]), so every error names the field path and the
//! bad value, and then the semantic rules run (see [`validate`]). All errors
//! are collected, not just the first.

pub mod disruption;
pub mod duration;
pub mod names;
pub mod objects;
mod parse;
pub mod placement;
pub mod prune;
pub mod reach;
pub mod recorded;
pub mod schema_check;
mod spec;
mod timing;
pub mod validate;
pub mod wrapped;

pub use parse::{
    Claims, DocumentRead, Documents, parse_policies, read_documents, split_documents,
    written_target,
};
pub use spec::{
    AntiAffinityType, HighAvailabilityPolicy, HighAvailabilityPolicySpec,
    HighAvailabilityPolicyStatus, LeaderElection, LeftAloneStatus, NodeTaintsPolicy,
    PodAntiAffinity, PodDisruptionBudgetPolicy, TopologySpread, WhenUnsatisfiable,
    WorkloadOverride,
};

use std::sync::OnceLock;

use kube::CustomResourceExt;

pub const GROUP: &str = "knativeha.dev";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "HighAvailabilityPolicy";
pub const API_VERSION: &str = "knativeha.dev/v1alpha1";

/// Knative's defaults for `config-leader-election`, used to check the
/// ordering of durations the policy leaves unset.
pub const DEFAULT_LEASE_DURATION: &str = "60s";
pub const DEFAULT_RENEW_DEADLINE: &str = "40s";
pub const DEFAULT_RETRY_PERIOD: &str = "10s";

/// The default `topologyKey` of pod anti-affinity.
pub const DEFAULT_TOPOLOGY_KEY: &str = "kubernetes.io/hostname";

/// A validated policy: the only form the engine accepts.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// `metadata.name` of the policy (used in change messages).
    pub name: String,
    pub spec: HighAvailabilityPolicySpec,
}

/// Why a policy document was rejected. Every error names the field path and the bad value.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum PolicyError {
    /// One rule broken at one field.
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
    /// The text is not a YAML/JSON document at all.
    #[error("not a HighAvailabilityPolicy: {0}")]
    Parse(String),
    /// One document of a file is not YAML (its line in the file).
    #[error("invalid YAML: {0}")]
    Yaml(String),
    /// Several errors (each an `Invalid` or `Parse`).
    #[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "))]
    Many(Vec<PolicyError>),
    /// An error in one document of a multi-document file (1-based index).
    #[error("{}", in_document(*index, error))]
    Document {
        index: usize,
        error: Box<PolicyError>,
    },
    /// An error in one item of a list (1-based index).
    #[error("item {item}: {error}")]
    Item {
        item: usize,
        error: Box<PolicyError>,
    },
    /// An error in the policy document a ConfigMap holds (`id`: `NAMESPACE/NAME`).
    #[error("ConfigMap {id}: data.{}: {error}", wrapped::DATA_KEY)]
    InConfigMap { id: String, error: Box<PolicyError> },
}

/// `document N: ...`, or `document N, item M: ...` for an error in a list item.
fn in_document(index: usize, error: &PolicyError) -> String {
    match error {
        PolicyError::Item { item, error } => format!("document {index}, item {item}: {error}"),
        other => format!("document {index}: {other}"),
    }
}

/// Result of loading a policy.
pub type Result<T, E = PolicyError> = std::result::Result<T, E>;

impl PolicyError {
    pub(crate) fn invalid(path: impl Into<String>, message: impl Into<String>) -> PolicyError {
        PolicyError::Invalid {
            path: path.into(),
            message: message.into(),
        }
    }

    /// Flattens into single errors (`Many` expanded; `Document`, `Item` and
    /// `InConfigMap` kept whole but with their inner errors expanded and
    /// re-wrapped).
    pub fn flatten(&self) -> Vec<PolicyError> {
        let rewrap = |error: &PolicyError, wrap: &dyn Fn(PolicyError) -> PolicyError| {
            error.flatten().into_iter().map(wrap).collect()
        };
        match self {
            PolicyError::Many(errors) => errors.iter().flat_map(|e| e.flatten()).collect(),
            PolicyError::Document { index, error } => rewrap(error, &|e| PolicyError::Document {
                index: *index,
                error: Box::new(e),
            }),
            PolicyError::Item { item, error } => rewrap(error, &|e| PolicyError::Item {
                item: *item,
                error: Box::new(e),
            }),
            PolicyError::InConfigMap { id, error } => {
                rewrap(error, &|e| PolicyError::InConfigMap {
                    id: id.clone(),
                    error: Box::new(e),
                })
            }
            other => vec![other.clone()],
        }
    }

    /// The error with its field path under `place` (`place: path`); an
    /// error that names no field is unchanged.
    pub(crate) fn under(self, place: &str) -> PolicyError {
        match self {
            PolicyError::Invalid { path, message } => PolicyError::Invalid {
                path: format!("{place}: {path}"),
                message,
            },
            other => other,
        }
    }

    fn from_list(mut errors: Vec<PolicyError>) -> PolicyError {
        if errors.len() == 1 {
            errors.remove(0)
        } else {
            PolicyError::Many(errors)
        }
    }
}

/// Writes integral `minimum`/`maximum` bounds as integers (`1`, not `1.0`).
fn integral_bounds(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                if (key == "minimum" || key == "maximum")
                    && let Some(f) = v.as_f64()
                    && f.fract() == 0.0
                    && f.abs() < 1e15
                {
                    *v = serde_json::Value::from(f as i64);
                } else {
                    integral_bounds(v);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(integral_bounds),
        _ => {}
    }
}

/// The CustomResourceDefinition as JSON, generated from the Rust types
/// (deterministic: maps are sorted).
pub fn crd_value() -> serde_json::Value {
    let mut value = serde_json::to_value(HighAvailabilityPolicy::crd()).unwrap_or_default();
    integral_bounds(&mut value);
    value
}

/// The CRD's `openAPIV3Schema`, computed once.
pub fn crd_schema() -> &'static serde_json::Value {
    static SCHEMA: OnceLock<serde_json::Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        crd_value()
            .pointer("/spec/versions/0/schema/openAPIV3Schema")
            .cloned()
            .unwrap_or_default()
    })
}
