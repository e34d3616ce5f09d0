//! The PodDisruptionBudgets the reconciler creates for governed
//! Deployments that ship none ([`crate::engine::budgets`]): which to create,
//! change or delete in one namespace, and the write of each.

use serde_json::{Value, json};

use super::objects;
use super::plan::ChangeLine;
use crate::engine::budgets::{self, created_for};
use crate::engine::{Context, Kind};
use crate::policy::Policy;

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
    pub change: String,
    pub action: Action,
}

impl BudgetChange {
    pub fn line(&self) -> ChangeLine {
        ChangeLine {
            change: self.change.clone(),
            rolls_pods: false,
        }
    }
}

/// What the created PDBs of `namespace` need so that they are what
/// `policy` wants (none where no policy governs it: each is deleted).
/// `listed` holds the namespace's objects as the reconciler lists them.
pub fn plan(
    policy: Option<&Policy>,
    namespace: &str,
    listed: &[Value],
    ctx: &Context,
) -> Vec<BudgetChange> {
    let wanted = policy.map_or_else(Vec::new, |p| budgets::wanted(p, namespace, listed, ctx));
    let why = policy.map_or_else(
        || "no policy governs the namespace".to_string(),
        |p| format!("policy {}", p.name),
    );
    let created: Vec<&Value> = listed
        .iter()
        .filter(|o| Kind::of(o) == Some(Kind::PodDisruptionBudget) && created_for(o).is_some())
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
                change: format!(
                    "poddisruptionbudget/{name}: created, {}, for deployment/{deployment}, which has none ({why})",
                    budgets::describe(pdb)
                ),
                name,
                action: Action::Create(pdb.clone()),
            }),
            Some(current) if current["spec"] != pdb["spec"] => changes.push(BudgetChange {
                change: format!(
                    "poddisruptionbudget/{name}: {} -> {} ({why})",
                    budgets::describe(current),
                    budgets::describe(pdb)
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
                change: format!(
                    "poddisruptionbudget/{name}: deleted, created for deployment/{} and no longer wanted ({why})",
                    created_for(pdb).unwrap_or_default()
                ),
                name,
                action: Action::Delete(pdb.clone()),
            });
        }
    }
    changes
}

/// Sends one planned write; the PDB it regards (for its Event).
pub async fn write(client: &kube::Client, action: &Action) -> Result<Value, kube::Error> {
    let kind = Kind::PodDisruptionBudget;
    match action {
        Action::Create(pdb) => objects::create(client, kind, pdb).await,
        Action::Update { current, spec } => {
            let patch: json_patch::Patch = serde_json::from_value(json!([
                {"op": "test", "path": "/metadata/resourceVersion",
                 "value": current["metadata"]["resourceVersion"]},
                {"op": "replace", "path": "/spec", "value": spec},
            ]))
            .map_err(kube::Error::SerdeError)?;
            objects::patch(client, kind, current, &patch, objects::FIELD_MANAGER).await
        }
        Action::Delete(pdb) => objects::delete(client, kind, pdb)
            .await
            .map(|()| pdb.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(spec: &str) -> Policy {
        let text = format!(
            "apiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\nmetadata: {{name: serving}}\nspec:\n  targetNamespace: knative-serving\n{spec}"
        );
        Policy::from_yaml(&text).expect("valid policy")
    }

    fn controller() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "controller", "namespace": "knative-serving"},
               "spec": {"selector": {"matchLabels": {"app": "controller"}},
                        "template": {"metadata": {"labels": {"app": "controller"}}, "spec": {}}}})
    }

    fn created(max_unavailable: i64) -> Value {
        let mut pdb = budgets::wanted(
            &policy("  replicas: 3\n  podDisruptionBudget: {maxUnavailable: 1}\n"),
            "knative-serving",
            &[controller()],
            &Context::default(),
        )
        .remove(0);
        pdb["spec"]["maxUnavailable"] = json!(max_unavailable);
        pdb["metadata"]["resourceVersion"] = json!("7");
        pdb
    }

    fn actions(policy: Option<&Policy>, listed: &[Value]) -> Vec<String> {
        plan(policy, "knative-serving", listed, &Context::default())
            .iter()
            .map(|c| c.change.clone())
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
