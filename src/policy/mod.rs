//! The HighAvailabilityPolicy model (one format for a file, a ConfigMap and
//! the custom resource) and its validation.
//!
//! `HighAvailabilityPolicy` is what users write; [`Policy`] is the validated
//! form, and the only one the engine accepts. A document is checked against
//! the CRD's own `openAPIV3Schema` first ([`schema_check`]), then by the
//! semantic rules ([`validate`]); every error names the field path and the
//! bad value, and all of them are collected, not just the first.

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

use std::fmt;
use std::sync::OnceLock;

use kube::CustomResourceExt;

pub const GROUP: &str = "knativeha.dev";
pub const KIND: &str = "HighAvailabilityPolicy";
pub const API_VERSION: &str = "knativeha.dev/v1alpha1";

/// Knative's defaults for `config-leader-election`, used to check the
/// ordering of durations the policy leaves unset.
pub const DEFAULT_LEASE_DURATION: &str = "60s";
pub const DEFAULT_RENEW_DEADLINE: &str = "40s";
pub const DEFAULT_RETRY_PERIOD: &str = "10s";

/// A validated policy.
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
    Invalid { path: Path, message: String },
    /// The text is not a YAML/JSON document at all.
    #[error("not a HighAvailabilityPolicy: {0}")]
    Parse(String),
    /// One document of a file is not YAML (its line in the file).
    #[error("invalid YAML: {0}")]
    Yaml(String),
    /// Several errors.
    #[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "))]
    Many(Vec<PolicyError>),
    /// An error where the document was found: its document and list item
    /// in a file (`document 2, item 1`), or its policy ConfigMap
    /// (`ConfigMap NAMESPACE/NAME: data.policy.yaml`).
    #[error("{place}: {error}")]
    At {
        place: String,
        error: Box<PolicyError>,
    },
}

/// A field path, step by step; shown as `spec.workloads[2].name`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Path(pub Vec<Step>);

/// One step of a [`Path`]: a member or a list index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    Key(String),
    Index(usize),
}

impl Path {
    /// This path, then member `key`.
    pub fn key(&self, key: &str) -> Path {
        self.then(Step::Key(key.to_string()))
    }

    /// This path, then list item `index`.
    pub fn index(&self, index: usize) -> Path {
        self.then(Step::Index(index))
    }

    fn then(&self, step: Step) -> Path {
        Path(self.0.iter().cloned().chain([step]).collect())
    }
}

/// A path of members: `["spec", "replicas"]`.
impl<const N: usize> From<[&str; N]> for Path {
    fn from(keys: [&str; N]) -> Path {
        Path(keys.map(|k| Step::Key(k.to_string())).to_vec())
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, step) in self.0.iter().enumerate() {
            match step {
                Step::Key(key) if i == 0 => f.write_str(key)?,
                Step::Key(key) => write!(f, ".{key}")?,
                Step::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// Result of loading a policy.
pub type Result<T, E = PolicyError> = std::result::Result<T, E>;

impl PolicyError {
    pub(crate) fn invalid(path: impl Into<Path>, message: impl Into<String>) -> PolicyError {
        PolicyError::Invalid {
            path: path.into(),
            message: message.into(),
        }
    }

    /// The error at `place` (`place: error`).
    pub(crate) fn at(self, place: impl Into<String>) -> PolicyError {
        PolicyError::At {
            place: place.into(),
            error: Box::new(self),
        }
    }

    /// Flattens into single errors (`Many` expanded; an `At` kept, with its
    /// inner errors expanded and each placed again).
    pub fn flatten(&self) -> Vec<PolicyError> {
        match self {
            PolicyError::Many(errors) => errors.iter().flat_map(PolicyError::flatten).collect(),
            PolicyError::At { place, error } => {
                let placed = error.flatten().into_iter();
                placed.map(|e| e.at(place.as_str())).collect()
            }
            other => vec![other.clone()],
        }
    }

    fn from_list(mut errors: Vec<PolicyError>) -> PolicyError {
        match errors.len() {
            1 => errors.remove(0),
            _ => PolicyError::Many(errors),
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
