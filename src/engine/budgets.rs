//! Budgets for governed Deployments that ship none.
//!
//! Knative ships PodDisruptionBudgets for its HPA-scaled data plane only
//! (activator, webhook, the Kourier gateway, eventing-webhook). A policy
//! that runs `controller`, `autoscaler`, `autoscaler-hpa` or
//! `net-kourier-controller` at 3 replicas leaves them without one, so a
//! single drain may evict every replica at once. Where a policy sets a
//! budget (`podDisruptionBudget`, global or per workload), the reconciler
//! creates `<deployment>-pdb` for each governed Deployment that runs more
//! than 1 replica and that no PDB covers yet; `preview` prints it.
//!
//! A created PDB always says `maxUnavailable`, the disruptions the
//! policy's budget allows at the Deployment's replicas: it never blocks a
//! drain, whatever the Deployment scales to later (a release's apply while
//! the webhook is down takes it back to 1). It carries [`CREATED_FOR`] and
//! the `app.kubernetes.io/managed-by` label; the webhook leaves it alone at
//! admission. It is never created where any PDB already selects the pods
//! (two budgets over one pod make the Eviction API refuse every eviction of
//! it), and it goes when it is no longer wanted: the Deployment back at 1
//! replica, excluded, the budget setting gone, another PDB now covering the
//! pods, `restore`.

use serde_json::{Map, Value, json};

use super::{Context, Kind, Target};
use crate::policy::Policy;
use crate::policy::disruption;

/// The annotation that marks a PDB this tool created, naming its Deployment.
pub const CREATED_FOR: &str = "knativeha.dev/created-for";
/// The label every created PDB carries.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "knative-ha-webhook");

/// The Deployment a PDB was created for (None for every other object).
pub fn created_for(object: &Value) -> Option<&str> {
    object
        .pointer("/metadata/annotations")?
        .get(CREATED_FOR)?
        .as_str()
}

/// The PDBs `policy` wants created in `namespace`, given what is there:
/// `objects` holds the namespace's Deployments and PDBs (other kinds are
/// skipped). A Deployment's replicas are those the engine gives it.
pub fn wanted(policy: &Policy, namespace: &str, objects: &[Value], ctx: &Context) -> Vec<Value> {
    let pdbs: Vec<&Value> = objects
        .iter()
        .filter(|o| Kind::of(o) == Some(Kind::PodDisruptionBudget))
        .collect();
    objects
        .iter()
        .filter(|o| Kind::of(o) == Some(Kind::Deployment))
        .filter_map(|d| budget_for(policy, namespace, d, &pdbs, ctx))
        .collect()
}

fn budget_for(
    policy: &Policy,
    namespace: &str,
    deployment: &Value,
    pdbs: &[&Value],
    ctx: &Context,
) -> Option<Value> {
    let name = deployment.pointer("/metadata/name")?.as_str()?;
    let target = Target {
        policy,
        hpa_targets: &ctx.hpa_targets,
        leader_election: ctx.leader_election.as_ref(),
        kind: Kind::Deployment,
        namespace,
        name,
        object: deployment,
    };
    if namespace != policy.spec.target_namespace
        || !target.governs(name)
        || target.is_excluded(name)
        || target.is_hpa_backed(name)
        || super::skipped(deployment.get("metadata").and_then(Value::as_object))
    {
        return None;
    }
    let setting = target
        .workload(name)
        .and_then(|w| w.pod_disruption_budget.as_ref())
        .or(policy.spec.pod_disruption_budget.as_ref())?;
    let replicas = replicas_after_engine(policy, namespace, deployment, ctx)?;
    let (is_min, value) = match (&setting.min_available, &setting.max_unavailable) {
        (Some(v), _) => (true, v),
        (None, Some(v)) => (false, v),
        _ => return None,
    };
    let allowed = disruption::disruptions_allowed(is_min, value, replicas).filter(|a| *a >= 1)?;
    let selector = deployment.pointer("/spec/selector")?.as_object()?;
    let labels = deployment
        .pointer("/spec/template/metadata/labels")?
        .as_object()?;
    let pdb_name = format!("{name}-pdb");
    let taken = pdbs.iter().any(|p| {
        created_for(p) != Some(name)
            && (p.pointer("/metadata/name") == Some(&json!(pdb_name)) || selects(p, labels))
    });
    if taken {
        return None;
    }
    Some(json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": pdb_name,
            "namespace": namespace,
            "labels": {MANAGED_BY.0: MANAGED_BY.1},
            "annotations": {CREATED_FOR: name},
        },
        "spec": {"maxUnavailable": allowed, "selector": selector},
    }))
}

/// `spec.replicas` of the Deployment as the engine leaves it (1 where
/// unset, as the API server defaults it); None above 1 is all that counts.
fn replicas_after_engine(
    policy: &Policy,
    namespace: &str,
    deployment: &Value,
    ctx: &Context,
) -> Option<i64> {
    let mutated = super::mutate_governed(
        policy,
        namespace,
        deployment,
        &ctx.hpa_targets,
        ctx.leader_election.as_ref(),
    )
    .ok()?;
    let object = mutated.object.as_ref().unwrap_or(deployment);
    let replicas = object
        .pointer("/spec/replicas")
        .map_or(Some(1), Value::as_i64)?;
    (replicas > 1).then_some(replicas)
}

/// Whether the PDB's label selector selects pods labelled `labels` (an
/// empty selector selects every pod of the namespace).
fn selects(pdb: &Value, labels: &Map<String, Value>) -> bool {
    let Some(selector) = pdb.pointer("/spec/selector").and_then(Value::as_object) else {
        return false;
    };
    let label = |k: &str| labels.get(k).and_then(Value::as_str);
    let matched = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .is_none_or(|m| m.iter().all(|(k, v)| label(k) == v.as_str()));
    let expressions = selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .is_none_or(|es| {
            es.iter().all(|e| {
                let key = e["key"].as_str().unwrap_or_default();
                let values: Vec<&str> = e["values"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                match e["operator"].as_str() {
                    Some("In") => label(key).is_some_and(|v| values.contains(&v)),
                    Some("NotIn") => label(key).is_none_or(|v| !values.contains(&v)),
                    Some("Exists") => label(key).is_some(),
                    Some("DoesNotExist") => label(key).is_none(),
                    _ => false,
                }
            })
        });
    matched && expressions
}

/// The budget a created PDB states, for a change line:
/// `maxUnavailable 1`.
pub fn describe(pdb: &Value) -> String {
    match pdb.pointer("/spec/maxUnavailable") {
        Some(v) => format!("maxUnavailable {v}"),
        None => "no budget".to_string(),
    }
}
