//! The HighAvailabilityPolicy model (one format for a file, a ConfigMap and
//! the custom resource) and its validation.
//!
//! `HighAvailabilityPolicy` is what users write; [`Policy`] is the validated,
//! normalised form the engine consumes. Only [`Policy`] values that passed
//! [`Policy::from_resource`] (or [`Policy::from_json`] / [`Policy::from_yaml`] /
//! [`parse_policies`]) ever reach the engine.
//!
//! Parsing goes through `serde_json::Value` first: the document is checked
//! against the CRD's own `openAPIV3Schema` (unknown fields, types, bounds,
//! enums; see [`schema_check`]), so every error names the field path and the
//! bad value, and then the semantic rules run (see [`validate`]). All errors
//! are collected, not just the first.

pub mod disruption;
pub mod duration;
pub mod prune;
pub mod schema_check;
pub mod validate;

use std::sync::OnceLock;

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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

/// Go duration syntax, positive, no sign (kept in sync with [`duration`]).
const DURATION_PATTERN: &str = r"^(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$";
/// A DNS-1123 label (namespace names).
const DNS_LABEL_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";

/// Spec of a HighAvailabilityPolicy.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[kube(
    group = "knativeha.dev",
    version = "v1alpha1",
    kind = "HighAvailabilityPolicy",
    shortname = "hap",
    status = "HighAvailabilityPolicyStatus",
    doc = "Makes the Knative control plane in one namespace highly available at admission time.",
    printcolumn = r#"{"name":"Target namespace","type":"string","description":"The namespace this policy governs","jsonPath":".spec.targetNamespace"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HighAvailabilityPolicySpec {
    /// The namespace this policy governs (a DNS-1123 label).
    #[schemars(length(min = 1, max = 63), pattern(DNS_LABEL_PATTERN))]
    pub target_namespace: String,
    /// Replicas for every governed Deployment (1..=100). HPA-backed
    /// Deployments get it as their HPA's minReplicas instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub replicas: Option<i32>,
    /// Leader election settings, written to ConfigMap config-leader-election.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_election: Option<LeaderElection>,
    /// Pod anti-affinity for every governed Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_anti_affinity: Option<PodAntiAffinity>,
    /// Topology spread constraints for every governed Deployment (replaces
    /// the pod template's list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Vec<TopologySpread>>,
    /// Settings for every PodDisruptionBudget in the namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_disruption_budget: Option<PodDisruptionBudgetPolicy>,
    /// Per-Deployment overrides.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<WorkloadOverride>,
    /// Deployment names this policy leaves alone (and the HPAs scaling them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// true: also change objects owned by the Knative Operator (an
    /// ownerReference with apiVersion operator.knative.dev/*). Default false:
    /// they are left unchanged with a warning, as the Operator's own
    /// spec.high-availability governs them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub govern_operator_owned: Option<bool>,
}

/// Leader election (Knative's `config-leader-election`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LeaderElection {
    /// false: single instances (replicas 1, buckets 1, `--disable-ha` where supported). Default true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Number of buckets the key space is split into (1..=10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10))]
    pub buckets: Option<i32>,
    /// Go duration, e.g. 60s. Must exceed renewDeadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DURATION_PATTERN))]
    pub lease_duration: Option<String>,
    /// Go duration, e.g. 40s. Must exceed 1.2 x retryPeriod (client-go's JitterFactor).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DURATION_PATTERN))]
    pub renew_deadline: Option<String>,
    /// Go duration, e.g. 10s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DURATION_PATTERN))]
    pub retry_period: Option<String>,
}

impl LeaderElection {
    /// `enabled`, defaulting to true.
    pub fn is_enabled(&self) -> bool {
        self.enabled.unwrap_or(true)
    }
}

/// How strongly replicas of one Deployment are kept apart.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema, Default)]
pub enum AntiAffinityType {
    /// `preferredDuringSchedulingIgnoredDuringExecution` with weight 100.
    Preferred,
    /// `requiredDuringSchedulingIgnoredDuringExecution`.
    Required,
    /// Leave the Deployment's pod anti-affinity as it is.
    #[default]
    None,
}

impl AntiAffinityType {
    pub fn as_str(self) -> &'static str {
        match self {
            AntiAffinityType::Preferred => "Preferred",
            AntiAffinityType::Required => "Required",
            AntiAffinityType::None => "None",
        }
    }
}

/// Pod anti-affinity between replicas of one Deployment.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodAntiAffinity {
    /// Preferred | Required | None.
    #[serde(rename = "type")]
    pub kind: AntiAffinityType,
    /// Node label to spread over. Default kubernetes.io/hostname.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub topology_key: Option<String>,
}

impl PodAntiAffinity {
    /// The topology key, defaulting to `kubernetes.io/hostname`.
    pub fn topology_key(&self) -> &str {
        self.topology_key.as_deref().unwrap_or(DEFAULT_TOPOLOGY_KEY)
    }
}

fn int_or_percent_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    // `pattern` only constrains strings and `minimum` only integers, so both
    // can sit next to x-kubernetes-int-or-string in a structural schema.
    schemars::json_schema!({
        "x-kubernetes-int-or-string": true,
        "minimum": 0,
        "pattern": "^(100|[1-9]?[0-9])%$"
    })
}

/// PodDisruptionBudget settings: exactly one of the two fields.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodDisruptionBudgetPolicy {
    /// An integer >= 0 or a percentage "0%".."100%".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_percent_schema")]
    pub min_available: Option<IntOrString>,
    /// An integer >= 0 or a percentage "0%".."100%".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "int_or_percent_schema")]
    pub max_unavailable: Option<IntOrString>,
}

/// Per-Deployment override.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkloadOverride {
    /// Deployment name.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Replicas for this Deployment (1..=100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub replicas: Option<i32>,
    /// Pod anti-affinity for this Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_anti_affinity: Option<PodAntiAffinity>,
    /// Topology spread constraints for this Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Vec<TopologySpread>>,
    /// Settings for the PodDisruptionBudget selecting this Deployment's pods
    /// (replaces spec.podDisruptionBudget for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_disruption_budget: Option<PodDisruptionBudgetPolicy>,
}

/// What the scheduler does when a spread constraint cannot be met.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema, Default)]
pub enum WhenUnsatisfiable {
    /// Schedule anyway, preferring placements that reduce the skew.
    #[default]
    ScheduleAnyway,
    /// Leave the pod Pending.
    DoNotSchedule,
}

impl WhenUnsatisfiable {
    pub fn as_str(self) -> &'static str {
        match self {
            WhenUnsatisfiable::ScheduleAnyway => "ScheduleAnyway",
            WhenUnsatisfiable::DoNotSchedule => "DoNotSchedule",
        }
    }
}

/// One topology spread constraint over the Deployment's own pods
/// (`labelSelector` = the Deployment's `spec.selector.matchLabels`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TopologySpread {
    /// Node label to spread over, e.g. topology.kubernetes.io/zone.
    #[schemars(length(min = 1))]
    pub topology_key: String,
    /// Maximum allowed difference in pod count between domains (1..=100, default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub max_skew: Option<i32>,
    /// ScheduleAnyway (default) | DoNotSchedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_unsatisfiable: Option<WhenUnsatisfiable>,
}

impl TopologySpread {
    pub fn max_skew(&self) -> i32 {
        self.max_skew.unwrap_or(1)
    }
    pub fn when_unsatisfiable(&self) -> WhenUnsatisfiable {
        self.when_unsatisfiable.unwrap_or_default()
    }
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
    /// One rule broken at one field.
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
    /// The text is not a YAML/JSON document at all.
    #[error("not a HighAvailabilityPolicy: {0}")]
    Parse(String),
    /// Several errors (each an `Invalid` or `Parse`).
    #[error("{}", .0.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; "))]
    Many(Vec<PolicyError>),
    /// An error in one document of a multi-document file (1-based index).
    #[error("document {index}: {error}")]
    Document {
        index: usize,
        error: Box<PolicyError>,
    },
}

impl PolicyError {
    pub(crate) fn invalid(path: impl Into<String>, message: impl Into<String>) -> PolicyError {
        PolicyError::Invalid {
            path: path.into(),
            message: message.into(),
        }
    }

    /// Flattens into single errors (`Many` expanded; `Document` kept whole
    /// but with its inner errors expanded and re-wrapped).
    pub fn flatten(&self) -> Vec<PolicyError> {
        match self {
            PolicyError::Many(errors) => errors.iter().flat_map(|e| e.flatten()).collect(),
            PolicyError::Document { index, error } => error
                .flatten()
                .into_iter()
                .map(|e| PolicyError::Document {
                    index: *index,
                    error: Box::new(e),
                })
                .collect(),
            other => vec![other.clone()],
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

impl Policy {
    /// Validates a parsed resource: every semantic rule, all errors collected.
    pub fn from_resource(res: &HighAvailabilityPolicy) -> Result<Policy, PolicyError> {
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
    /// source receives it from the API server). Unknown fields anywhere
    /// (except inside `metadata` and `status`) are errors. Never panics.
    pub fn from_json(value: &serde_json::Value) -> Result<Policy, PolicyError> {
        let errors = schema_check::check_document(value);
        if !errors.is_empty() {
            return Err(PolicyError::from_list(errors));
        }
        let res: HighAvailabilityPolicy =
            serde_json::from_value(value.clone()).map_err(|e| PolicyError::Parse(e.to_string()))?;
        Policy::from_resource(&res)
    }

    /// Parses and validates one YAML (or JSON) policy document.
    pub fn from_yaml(text: &str) -> Result<Policy, PolicyError> {
        let value: serde_json::Value =
            serde_saphyr::from_str(text).map_err(|e| PolicyError::Parse(e.to_string()))?;
        Policy::from_json(&value)
    }
}

/// Splits multi-document YAML into `(1-based index, text)` pairs, skipping
/// documents that hold only comments and blank lines. The index counts every
/// document, skipped or not, so it matches what a reader counts in the file.
pub fn split_documents(text: &str) -> Vec<(usize, String)> {
    let mut docs: Vec<(usize, String)> = Vec::new();
    let mut current = String::new();
    let mut index = 1;
    let mut seen_marker_or_content = false;
    let flush = |docs: &mut Vec<(usize, String)>, current: &mut String, index: usize| {
        let has_content = current.lines().any(|l| {
            let t = l.trim();
            !t.is_empty() && !t.starts_with('#') && t != "..."
        });
        if has_content {
            docs.push((index, std::mem::take(current)));
        } else {
            current.clear();
        }
    };
    for line in text.split_inclusive('\n') {
        let is_marker = line.starts_with("---")
            && line[3..]
                .chars()
                .next()
                .is_none_or(|c| c == ' ' || c == '\t' || c == '\n' || c == '\r');
        if is_marker {
            if seen_marker_or_content {
                flush(&mut docs, &mut current, index);
                index += 1;
            }
            seen_marker_or_content = true;
            // content after the marker on the same line (e.g. `--- {a: 1}`)
            let rest = line[3..].trim_start_matches([' ', '\t']);
            if !rest.trim().is_empty() && !rest.trim_start().starts_with('#') {
                current.push_str(rest);
            }
            continue;
        }
        let t = line.trim();
        if !t.is_empty() && !t.starts_with('#') && !t.starts_with('%') {
            seen_marker_or_content = true;
        }
        current.push_str(line);
    }
    flush(&mut docs, &mut current, index);
    docs
}

/// Parses a multi-document policy file: every non-empty document must be a
/// valid policy. Errors name the (1-based) document index. Two policies for
/// the same target namespace are an error.
pub fn parse_policies(text: &str) -> Result<Vec<Policy>, PolicyError> {
    let mut policies: Vec<Policy> = Vec::new();
    let mut errors = Vec::new();
    for (index, doc) in split_documents(text) {
        match Policy::from_yaml(&doc) {
            Ok(policy) => {
                if let Some(other) = policies
                    .iter()
                    .find(|p| p.spec.target_namespace == policy.spec.target_namespace)
                {
                    errors.push(PolicyError::Document {
                        index,
                        error: Box::new(PolicyError::invalid(
                            "spec.targetNamespace",
                            format!(
                                "{:?} is already governed by policy {:?}; one policy per namespace",
                                policy.spec.target_namespace, other.name
                            ),
                        )),
                    });
                } else {
                    policies.push(policy);
                }
            }
            Err(error) => errors.push(PolicyError::Document {
                index,
                error: Box::new(error),
            }),
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
