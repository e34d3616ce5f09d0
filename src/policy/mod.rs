//! The HighAvailabilityPolicy model (one format for a file, a ConfigMap and
//! the custom resource) and its validation.
//!
//! `HighAvailabilityPolicy` is what users write; [`Policy`] is the validated,
//! normalised form the engine consumes. Only [`Policy`] values that passed
//! [`Policy::from_resource`] ever reach the engine.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "knativeha.dev";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "HighAvailabilityPolicy";
pub const API_VERSION: &str = "knativeha.dev/v1alpha1";

/// Spec of a HighAvailabilityPolicy.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[kube(
    group = "knativeha.dev",
    version = "v1alpha1",
    kind = "HighAvailabilityPolicy",
    shortname = "hap",
    status = "HighAvailabilityPolicyStatus"
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HighAvailabilityPolicySpec {
    /// The namespace this policy governs.
    pub target_namespace: String,
    /// Replicas for every governed Deployment (1..=100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_election: Option<LeaderElection>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_anti_affinity: Option<PodAntiAffinity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_disruption_budget: Option<PodDisruptionBudgetPolicy>,
    /// Per-Deployment overrides.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<WorkloadOverride>,
    /// Deployment names this policy leaves alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LeaderElection {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buckets: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_duration: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_deadline: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_period: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema, Default)]
pub enum AntiAffinityType {
    Preferred,
    Required,
    #[default]
    None,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodAntiAffinity {
    #[serde(rename = "type")]
    pub kind: AntiAffinityType,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_key: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodDisruptionBudgetPolicy {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_available: Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<k8s_openapi::apimachinery::pkg::util::intstr::IntOrString>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkloadOverride {
    /// Deployment name.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_anti_affinity: Option<PodAntiAffinity>,
}

/// Status written by the cluster source.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct HighAvailabilityPolicyStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
}

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
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
    #[error("not a HighAvailabilityPolicy: {0}")]
    Parse(String),
    #[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "))]
    Many(Vec<PolicyError>),
}

impl Policy {
    /// Validates a parsed resource (TODO: the full rule set).
    pub fn from_resource(res: &HighAvailabilityPolicy) -> Result<Policy, PolicyError> {
        let name = res.metadata.name.clone().unwrap_or_default();
        Ok(Policy {
            name,
            spec: res.spec.clone(),
        })
    }

    /// Parses and validates one policy given as a JSON value (as the cluster
    /// source receives it from the API server). Unknown fields anywhere are
    /// errors.
    pub fn from_json(value: &serde_json::Value) -> Result<Policy, PolicyError> {
        let res: HighAvailabilityPolicy =
            serde_json::from_value(value.clone()).map_err(|e| PolicyError::Parse(e.to_string()))?;
        Policy::from_resource(&res)
    }

    /// Parses and validates one YAML (or JSON) policy document.
    pub fn from_yaml(text: &str) -> Result<Policy, PolicyError> {
        let res: HighAvailabilityPolicy =
            serde_saphyr::from_str(text).map_err(|e| PolicyError::Parse(e.to_string()))?;
        Policy::from_resource(&res)
    }
}
