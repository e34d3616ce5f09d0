//! Budgets for governed Deployments that ship none (docs/policy.md says
//! when and which): [`wanted`] says which budgets a policy wants, [`plan`]
//! what to create, change or delete to get there, as data that the
//! reconciler writes, `audit` reports and `preview` prints. A created PDB
//! always says `maxUnavailable`, so it never blocks a drain whatever the
//! Deployment scales to later, and is never created where any PDB already
//! selects the pods (two budgets over one pod make the Eviction API refuse
//! every eviction of it). Its marks are [`super::created`]'s.

use serde_json::{Map, Value, json};

use super::created::{CREATED_FOR, MANAGED_BY, created_for, taken_over};
use super::{Cause, Change, Facts, Kind, Snapshot, Target, What};
use crate::policy::Policy;
use crate::policy::disruption;

/// The PDBs the snapshot's policy for `namespace` wants created there,
/// given its Deployments (at the replicas the engine gives them) and PDBs
/// in `objects`.
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
    let allowed = if !target.is_hpa_backed(name) {
        let replicas = replicas_after_engine(policy, namespace, deployment, facts)?;
        json!(
            disruption::disruptions_allowed(field == "minAvailable", value, replicas)
                .filter(|a| *a >= 1)?
        )
    } else if field == "maxUnavailable" {
        // The policy's own (a percentage keeps scaling with the HPA).
        json!(value)
    } else {
        // Its `minAvailable` moved into `maxUnavailable` from the fewest
        // replicas the HPA runs up.
        let fewest = super::pdb::judged_replicas(&target, name).replicas;
        json!(disruption::in_field(
            field,
            value,
            "maxUnavailable",
            i64::from(fewest)
        )?)
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

/// The budget a created PDB states, for a change line: `maxUnavailable 1`.
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

/// The writes that make the created PDBs of `namespace` (in `listed`, its
/// objects) what the snapshot's policy there wants; without one, each goes.
pub fn plan(snapshot: &Snapshot, namespace: &str, listed: &[Value]) -> Vec<BudgetChange> {
    let policy = snapshot.policy_for(namespace);
    let wanted = wanted(snapshot, namespace, listed);
    let change = |name: String, what: What, action: Action| {
        let cause = policy.map_or_else(
            || Cause::Because("no policy governs the namespace".to_string()),
            |p| Cause::Policy(p.name.clone()),
        );
        BudgetChange {
            change: Change::new(Kind::PodDisruptionBudget.prefix(), &name, what, cause),
            name,
            action,
        }
    };
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
            None => {
                let what = What::BudgetCreated {
                    budget: describe(pdb),
                    deployment: deployment.to_string(),
                };
                changes.push(change(name, what, Action::Create(pdb.clone())));
            }
            Some(current) if current["spec"] != pdb["spec"] => {
                let what = What::BudgetChanged {
                    before: describe(current),
                    after: describe(pdb),
                };
                let action = Action::Update {
                    current: (*current).clone(),
                    spec: pdb["spec"].clone(),
                };
                changes.push(change(name, what, action));
            }
            Some(_) => {}
        }
    }
    for pdb in created {
        let name = name_of(pdb);
        if wanted.iter().all(|w| name_of(w) != name) {
            let deployment = created_for(pdb).unwrap_or_default().to_string();
            let what = What::BudgetDeleted { deployment };
            changes.push(change(name, what, Action::Delete(pdb.clone())));
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
