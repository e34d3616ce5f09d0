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
//! admission ([`super::created`] holds its marks). It is never created where any PDB already selects the pods
//! (two budgets over one pod make the Eviction API refuse every eviction of
//! it), and it goes when it is no longer wanted: the Deployment back at 1
//! replica, excluded, the budget setting gone, another PDB now covering the
//! pods, `restore`. [`wanted`] says which budgets a policy wants; [`plan`]
//! what to create, change or delete to get there, as data that the
//! reconciler writes, `audit` reports and `preview` prints.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Map, Value, json};

use super::created::{CREATED_FOR, MANAGED_BY, created_for, taken_over};
use super::{Cause, Change, Facts, Kind, Snapshot, Target, What};
use crate::policy::Policy;
use crate::policy::disruption;

/// The PDBs the snapshot's policy for `namespace` wants created there,
/// given what is there: `objects` holds the namespace's Deployments and
/// PDBs (other kinds are skipped). A Deployment's replicas are those the
/// engine gives it. None where no policy governs the namespace.
pub fn wanted(snapshot: &Snapshot, namespace: &str, objects: &[Value]) -> Vec<Value> {
    let Some(policy) = snapshot.policy_for(namespace) else {
        return Vec::new();
    };
    let facts = snapshot.facts(namespace);
    let pdbs: Vec<&Value> = objects
        .iter()
        .filter(|o| Kind::of(o) == Some(Kind::PodDisruptionBudget))
        .collect();
    objects
        .iter()
        .filter(|o| Kind::of(o) == Some(Kind::Deployment))
        .filter_map(|d| budget_for(policy, namespace, d, &pdbs, facts))
        .collect()
}

fn budget_for(
    policy: &Policy,
    namespace: &str,
    deployment: &Value,
    pdbs: &[&Value],
    facts: Facts<'_>,
) -> Option<Value> {
    let name = deployment.pointer("/metadata/name")?.as_str()?;
    let target = Target {
        policy,
        facts,
        kind: Kind::Deployment,
        namespace,
        name,
        object: deployment,
    };
    let metadata = deployment.get("metadata").and_then(Value::as_object);
    if namespace != policy.spec.target_namespace
        || !target.governs(name)
        || target.is_excluded(name)
        || super::skipped(metadata)
        || super::standing::operator_left_alone(policy, metadata).is_some()
    {
        return None;
    }
    let ships_one = crate::knative::component(name).is_some_and(|c| c.pdb.is_some());
    if ships_one && !facts.hpa_targets.contains(super::HPAS_LISTED) {
        // The release ships a budget for it (the activator's
        // `activator-pdb`), and what is listed may be only part of the
        // namespace (`preview`'s manifests): not made up beside it.
        return None;
    }
    let (field, value) = super::pdb::setting(policy, |w| w == name)?;
    let allowed = if target.is_hpa_backed(name) {
        hpa_scaled(&target, name, field, value)?
    } else {
        let replicas = replicas_after_engine(policy, namespace, deployment, facts)?;
        json!(
            disruption::disruptions_allowed(field == "minAvailable", value, replicas)
                .filter(|a| *a >= 1)?
        )
    };
    let selector = deployment.pointer("/spec/selector")?.as_object()?;
    let labels = deployment
        .pointer("/spec/template/metadata/labels")?
        .as_object()?;
    let pdb_name = format!("{name}-pdb");
    let taken = pdbs.iter().any(|p| {
        (created_for(p) != Some(name) || taken_over(p))
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

/// The `maxUnavailable` of the budget of a Deployment an HPA scales: the
/// policy's own where it sets `maxUnavailable` (a percentage keeps scaling
/// with the HPA), else its `minAvailable` moved into `maxUnavailable`
/// ([`disruption::in_field`]) from the fewest replicas the HPA runs up.
fn hpa_scaled(target: &Target<'_>, name: &str, field: &str, value: &IntOrString) -> Option<Value> {
    let v = if field == "maxUnavailable" {
        value.clone()
    } else {
        let fewest = super::pdb::judged_replicas(target, name).replicas;
        disruption::in_field(field, value, "maxUnavailable", i64::from(fewest))?
    };
    Some(match v {
        IntOrString::Int(n) => json!(n),
        IntOrString::String(s) => json!(s),
    })
}

/// `spec.replicas` of the Deployment as the engine leaves it (1 where
/// unset, as the API server defaults it); None above 1 is all that counts.
fn replicas_after_engine(
    policy: &Policy,
    namespace: &str,
    deployment: &Value,
    facts: Facts<'_>,
) -> Option<i64> {
    let mutated = super::mutate_governed(policy, namespace, deployment, facts).ok()?;
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

/// One write to a created PDB.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    Create(Value),
    /// The stored PDB and the spec it should have.
    Update {
        current: Value,
        spec: Value,
    },
    Delete(Value),
}

impl Action {
    /// The API verb of the write.
    pub fn verb(&self) -> &'static str {
        match self {
            Action::Create(_) => "create",
            Action::Update { .. } => "patch",
            Action::Delete(_) => "delete",
        }
    }
}

/// A planned write with its change line.
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetChange {
    pub name: String,
    pub change: Change,
    pub action: Action,
}

/// What the created PDBs of `namespace` need so that they are what the
/// snapshot's policy there wants (none where no policy governs it: each is
/// deleted). `listed` holds the namespace's objects as the reconciler
/// lists them.
pub fn plan(snapshot: &Snapshot, namespace: &str, listed: &[Value]) -> Vec<BudgetChange> {
    let policy = snapshot.policy_for(namespace);
    let wanted = wanted(snapshot, namespace, listed);
    let cause = || {
        policy.map_or_else(
            || Cause::Because("no policy governs the namespace".to_string()),
            |p| Cause::Policy(p.name.clone()),
        )
    };
    const PDB: &str = "poddisruptionbudget";
    let created: Vec<&Value> = listed
        .iter()
        .filter(|o| {
            Kind::of(o) == Some(Kind::PodDisruptionBudget)
                && created_for(o).is_some()
                && !taken_over(o)
        })
        .collect();
    let name_of = |o: &Value| {
        o["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let mut changes = Vec::new();
    for pdb in &wanted {
        let name = name_of(pdb);
        let deployment = created_for(pdb).unwrap_or_default();
        match created.iter().find(|c| name_of(c) == name) {
            None => changes.push(BudgetChange {
                change: Change::new(
                    PDB,
                    &name,
                    What::BudgetCreated {
                        budget: describe(pdb),
                        deployment: deployment.to_string(),
                    },
                    cause(),
                ),
                name,
                action: Action::Create(pdb.clone()),
            }),
            Some(current) if current["spec"] != pdb["spec"] => changes.push(BudgetChange {
                change: Change::new(
                    PDB,
                    &name,
                    What::BudgetChanged {
                        before: describe(current),
                        after: describe(pdb),
                    },
                    cause(),
                ),
                name,
                action: Action::Update {
                    current: (*current).clone(),
                    spec: pdb["spec"].clone(),
                },
            }),
            Some(_) => {}
        }
    }
    for pdb in created {
        let name = name_of(pdb);
        if wanted.iter().all(|w| name_of(w) != name) {
            changes.push(BudgetChange {
                change: Change::new(
                    PDB,
                    &name,
                    What::BudgetDeleted {
                        deployment: created_for(pdb).unwrap_or_default().to_string(),
                    },
                    cause(),
                ),
                name,
                action: Action::Delete(pdb.clone()),
            });
        }
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(spec: &str) -> Policy {
        Policy::serving_with(spec)
    }

    fn controller() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "controller", "namespace": "knative-serving"},
               "spec": {"selector": {"matchLabels": {"app": "controller"}},
                        "template": {"metadata": {"labels": {"app": "controller"}}, "spec": {}}}})
    }

    fn created(max_unavailable: i64) -> Value {
        let mut pdb = wanted(
            &Snapshot::from_policies([policy(
                "  replicas: 3\n  podDisruptionBudget: {maxUnavailable: 1}\n",
            )]),
            "knative-serving",
            &[controller()],
        )
        .remove(0);
        pdb["spec"]["maxUnavailable"] = json!(max_unavailable);
        pdb["metadata"]["resourceVersion"] = json!("7");
        pdb
    }

    fn actions(policy: Option<&Policy>, listed: &[Value]) -> Vec<String> {
        let snapshot = Snapshot::from_policies(policy.cloned());
        plan(&snapshot, "knative-serving", listed)
            .iter()
            .map(|c| c.change.to_string())
            .collect()
    }

    #[test]
    fn a_missing_budget_is_created_a_changed_one_updated_an_unwanted_one_deleted() {
        let p = policy("  replicas: 3\n  podDisruptionBudget: {maxUnavailable: 1}\n");
        assert_eq!(
            actions(Some(&p), &[controller()]),
            [
                "poddisruptionbudget/controller-pdb: created, maxUnavailable 1, for deployment/controller, which has none (policy serving)"
            ]
        );
        assert_eq!(
            actions(Some(&p), &[controller(), created(1)]),
            Vec::<String>::new()
        );
        assert_eq!(
            actions(Some(&p), &[controller(), created(2)]),
            [
                "poddisruptionbudget/controller-pdb: maxUnavailable 2 -> maxUnavailable 1 (policy serving)"
            ]
        );
        let at_one = policy("  podDisruptionBudget: {maxUnavailable: 1}\n");
        assert_eq!(
            actions(Some(&at_one), &[controller(), created(1)]),
            [
                "poddisruptionbudget/controller-pdb: deleted, created for deployment/controller and no longer wanted (policy serving)"
            ]
        );
        assert_eq!(
            actions(None, &[controller(), created(1)]),
            [
                "poddisruptionbudget/controller-pdb: deleted, created for deployment/controller and no longer wanted (no policy governs the namespace)"
            ]
        );
    }
}
