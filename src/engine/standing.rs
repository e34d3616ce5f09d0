//! Where an object stands with a policy: not one of its targets, governed,
//! or a target the policy leaves alone, and why. The reconciler (the
//! policy's status and its metric) and `audit` read [`standing`]; admission
//! and `preview` decide with its parts (`aimed`, `operator_left_alone`),
//! so a policy that changes nothing it targets says so everywhere.

use std::fmt;

use serde::Serialize;
use serde_json::Value;

use super::target::Target;
use super::{EngineError, Facts, Kind, Result, SKIP_LABEL};
use crate::policy::Policy;

/// Where an object stands with a policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Not one of the policy's targets: another namespace, a kind it does
    /// not govern, a user's own object the policy does not name.
    Untargeted,
    /// A target the policy governs.
    Governed,
    /// A target the policy leaves unchanged.
    LeftAlone(LeftAlone),
}

/// Why a target is left unchanged.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(tag = "reason", content = "by", rename_all = "camelCase")]
pub enum LeftAlone {
    /// It carries the opt-out label [`SKIP_LABEL`] `"true"`.
    OptedOut,
    /// The policy's `exclude` names the Deployment (the one it belongs to).
    Excluded(String),
    /// The Knative Operator's resource (`Kind/name`) owns it and the policy
    /// sets `governOperatorOwned: false`.
    OperatorOwned(String),
}

impl LeftAlone {
    /// Every [`LeftAlone::label`].
    pub const LABELS: [&'static str; 3] = ["opted-out", "excluded", "operator-owned"];

    /// A short name of the reason, for a metric label.
    pub fn label(&self) -> &'static str {
        match self {
            LeftAlone::OptedOut => "opted-out",
            LeftAlone::Excluded(_) => "excluded",
            LeftAlone::OperatorOwned(_) => "operator-owned",
        }
    }
}

impl fmt::Display for LeftAlone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeftAlone::OptedOut => write!(f, "carries the opt-out label {SKIP_LABEL}: \"true\""),
            LeftAlone::Excluded(d) => write!(f, "the policy's exclude names {d}"),
            LeftAlone::OperatorOwned(owner) => write!(
                f,
                "owned by the Knative Operator's {owner} (the policy sets spec.governOperatorOwned: false)"
            ),
        }
    }
}

/// Where `object` in `namespace` stands with `policy`, given what the
/// cluster knows (`facts`). An error is a malformed governed object.
pub fn standing(
    policy: &Policy,
    namespace: &str,
    object: &Value,
    facts: Facts<'_>,
) -> Result<Standing> {
    let Some(target) = aimed(policy, namespace, object, facts)? else {
        return Ok(Standing::Untargeted);
    };
    let metadata = object.get("metadata").and_then(Value::as_object);
    if !target.governs_object()? {
        return Ok(Standing::Untargeted);
    }
    if super::skipped(metadata) {
        return Ok(Standing::LeftAlone(LeftAlone::OptedOut));
    }
    if let Some(deployment) = excluded(&target) {
        return Ok(Standing::LeftAlone(LeftAlone::Excluded(deployment)));
    }
    if let Some(owner) = operator_left_alone(policy, metadata) {
        return Ok(Standing::LeftAlone(LeftAlone::OperatorOwned(owner)));
    }
    Ok(Standing::Governed)
}

/// The object as `policy` sees it in `namespace`, or None where the policy
/// has nothing to say of it: another namespace, a kind the engine does not
/// govern, or an object whose own `metadata.namespace` is another one.
pub(crate) fn aimed<'a>(
    policy: &'a Policy,
    namespace: &'a str,
    object: &'a Value,
    facts: Facts<'a>,
) -> Result<Option<Target<'a>>> {
    let Some(obj) = object.as_object() else {
        return Err(EngineError::NotAnObject);
    };
    if namespace != policy.spec.target_namespace {
        return Ok(None);
    }
    let Some(kind) = Kind::of(object) else {
        return Ok(None);
    };
    let metadata = obj.get("metadata").and_then(Value::as_object);
    if let Some(ns) = metadata
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        && !ns.is_empty()
        && ns != namespace
    {
        return Ok(None);
    }
    let name = metadata
        .and_then(|m| m.get("name").or_else(|| m.get("generateName")))
        .and_then(Value::as_str)
        .unwrap_or("");
    Ok(Some(Target {
        policy,
        facts,
        kind,
        namespace,
        name,
        object,
    }))
}

/// The owner (`Kind/name`) of an object the Knative Operator owns, when the
/// policy leaves such objects alone (`governOperatorOwned: false`).
pub(crate) fn operator_left_alone(
    policy: &Policy,
    metadata: Option<&serde_json::Map<String, Value>>,
) -> Option<String> {
    if policy.spec.governs_operator_owned() {
        return None;
    }
    super::operator_owner(metadata)
}

/// The excluded Deployment a target belongs to, if any: the Deployment (or
/// its Scale) itself, the one an HPA scales, the one a PDB covers.
fn excluded(t: &Target<'_>) -> Option<String> {
    t.belongs_to()
        .find(|d| t.is_excluded(d))
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeSet;

    fn policy(extra: &str) -> Policy {
        Policy::serving_with(&format!("  replicas: 3\n{extra}"))
    }

    fn at(p: &Policy, object: &Value) -> Standing {
        let targets = BTreeSet::new();
        let facts = Facts {
            hpa_targets: &targets,
            leader_election: None,
            priority_classes: None,
        };
        standing(p, "knative-serving", object, facts).unwrap()
    }

    fn deployment(name: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": name, "namespace": "knative-serving"}, "spec": {}})
    }

    #[test]
    fn each_reason_a_target_is_left_alone() {
        let p = policy("  exclude: [autoscaler]\n  governOperatorOwned: false\n");
        assert_eq!(at(&p, &deployment("controller")), Standing::Governed);
        assert_eq!(at(&p, &deployment("my-app")), Standing::Untargeted);
        assert_eq!(
            at(&p, &deployment("autoscaler")),
            Standing::LeftAlone(LeftAlone::Excluded("autoscaler".into()))
        );
        let mut skipped = deployment("controller");
        skipped["metadata"]["labels"] = json!({SKIP_LABEL: "true"});
        assert_eq!(at(&p, &skipped), Standing::LeftAlone(LeftAlone::OptedOut));
        let mut owned = deployment("controller");
        owned["metadata"]["ownerReferences"] = json!([{"apiVersion": "operator.knative.dev/v1beta1",
            "kind": "KnativeServing", "name": "ks", "uid": "u"}]);
        assert_eq!(
            at(&p, &owned),
            Standing::LeftAlone(LeftAlone::OperatorOwned("KnativeServing/ks".into()))
        );
        assert_eq!(
            at(&policy(""), &owned),
            Standing::Governed,
            "governed by default"
        );
        let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "autoscaler-pdb", "namespace": "knative-serving"},
            "spec": {"selector": {"matchLabels": {"app": "autoscaler"}}}});
        assert_eq!(
            at(&p, &pdb),
            Standing::LeftAlone(LeftAlone::Excluded("autoscaler".into()))
        );
        assert_eq!(
            at(
                &p,
                &json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "config-leader-election"}})
            ),
            Standing::Governed
        );
    }
}
