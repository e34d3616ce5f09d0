//! The HighAvailabilityPolicy spec as users write it: the custom resource
//! type and its parts, with the CRD schema constraints next to each field.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Go duration syntax, positive, no sign (kept in sync with [`super::duration`]).
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
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!(has(self.leaderElection) && has(self.leaderElection.enabled) && !self.leaderElection.enabled) || !has(self.replicas) || self.replicas == 1",
    "message": "replicas must be 1 (or unset) when leaderElection.enabled is false"
}]))]
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
    #[schemars(length(min = 1))]
    pub topology_spread_constraints: Option<Vec<TopologySpread>>,
    /// Settings for every PodDisruptionBudget in the namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_disruption_budget: Option<PodDisruptionBudgetPolicy>,
    /// The PriorityClass of every governed Deployment's pods (so that
    /// higher-priority workloads do not preempt the control plane). The
    /// PriorityClass must exist: the API server refuses pods naming one
    /// that does not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub priority_class_name: Option<String>,
    /// Per-Deployment overrides.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workloads: Vec<WorkloadOverride>,
    /// Deployment names this policy leaves alone (and the HPAs scaling them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<String>,
    /// Whether objects owned by the Knative Operator (an ownerReference with
    /// apiVersion operator.knative.dev/*) are governed too. Default true: the
    /// policy's values win over the KnativeServing's and KnativeEventing's own
    /// (the policy's status names the fields it overrides). false: they are
    /// left unchanged with a warning, and the Operator's spec.high-availability
    /// alone governs them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub govern_operator_owned: Option<bool>,
}

impl HighAvailabilityPolicySpec {
    /// Whether the policy governs objects the Knative Operator owns
    /// (`governOperatorOwned`, true unless set false).
    pub fn governs_operator_owned(&self) -> bool {
        self.govern_operator_owned != Some(false)
    }

    /// `leaderElection.enabled` is false: single instances.
    pub fn leader_election_off(&self) -> bool {
        matches!(&self.leader_election, Some(le) if !le.is_enabled())
    }

    /// Every PriorityClass the policy names, with its field
    /// (`spec.priorityClassName`, `spec.workloads[i].priorityClassName`).
    pub fn priority_classes(&self) -> impl Iterator<Item = (String, &str)> {
        let global = self
            .priority_class_name
            .as_deref()
            .map(|c| ("spec.priorityClassName".to_string(), c));
        let own = self.workloads.iter().enumerate().filter_map(|(i, w)| {
            let c = w.priority_class_name.as_deref()?;
            Some((format!("spec.workloads[{i}].priorityClassName"), c))
        });
        global.into_iter().chain(own)
    }
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
        self.topology_key
            .as_deref()
            .unwrap_or("kubernetes.io/hostname")
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
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "has(self.minAvailable) != has(self.maxUnavailable)",
    "message": "set exactly one of minAvailable and maxUnavailable"
}]))]
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
    #[schemars(length(min = 1))]
    pub topology_spread_constraints: Option<Vec<TopologySpread>>,
    /// Settings for the PodDisruptionBudget selecting this Deployment's pods
    /// (replaces spec.podDisruptionBudget for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_disruption_budget: Option<PodDisruptionBudgetPolicy>,
    /// The PriorityClass of this Deployment's pods (replaces
    /// spec.priorityClassName for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub priority_class_name: Option<String>,
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

/// Whether a spread constraint counts the nodes whose taints the pod does
/// not tolerate (Kubernetes' `nodeTaintsPolicy`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema, Default)]
pub enum NodeTaintsPolicy {
    /// Leave out tainted nodes the pod does not tolerate: a lost zone (its
    /// nodes tainted unreachable) stops counting as a domain, so the
    /// replacements of its pods can schedule on the zones left.
    #[default]
    Honor,
    /// Count every node, tainted or not (Kubernetes' own default).
    Ignore,
}

/// `as_str` of a unit enum: the variant's name, as serde writes it.
macro_rules! variant_names {
    ($ty:ident: $($variant:ident),+) => {
        impl $ty {
            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => stringify!($variant)),+
                }
            }
        }
    };
}

variant_names!(AntiAffinityType: Preferred, Required, None);
variant_names!(WhenUnsatisfiable: ScheduleAnyway, DoNotSchedule);
variant_names!(NodeTaintsPolicy: Honor, Ignore);

/// One topology spread constraint over the Deployment's own pods
/// (`labelSelector` = the Deployment's `spec.selector.matchLabels`, and
/// `matchLabelKeys: [pod-template-hash]`: each ReplicaSet of a rollout is
/// spread on its own).
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
    /// Honor (default) | Ignore: whether nodes with taints the pods do not
    /// tolerate (a lost zone's) count as domains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_taints_policy: Option<NodeTaintsPolicy>,
}

impl TopologySpread {
    pub fn max_skew(&self) -> i32 {
        self.max_skew.unwrap_or(1)
    }
    pub fn when_unsatisfiable(&self) -> WhenUnsatisfiable {
        self.when_unsatisfiable.unwrap_or_default()
    }
    pub fn node_taints_policy(&self) -> NodeTaintsPolicy {
        self.node_taints_policy.unwrap_or_default()
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
    /// The last spec the webhook found valid, as it applies it. While the
    /// current spec is invalid this one stays in force, across restarts of
    /// the webhook too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_valid_spec: Option<HighAvailabilityPolicySpec>,
    /// `metadata.generation` of `lastValidSpec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_valid_generation: Option<i64>,
    /// The policy's targets in its namespace (governed and left alone), as
    /// the reconciler's last pass found them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub governed_objects: Option<i64>,
    /// The targets the policy leaves unchanged, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left_alone: Option<Vec<LeftAloneStatus>>,
    /// The Knative Operator's fields (of a KnativeServing or KnativeEventing
    /// in the namespace) that the policy's values override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_overrides: Option<Vec<String>>,
}

/// One target a policy leaves unchanged.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct LeftAloneStatus {
    pub kind: String,
    pub name: String,
    /// Why: the opt-out label, the policy's exclude, or the Knative
    /// Operator's ownership with governOperatorOwned false.
    pub reason: String,
}
