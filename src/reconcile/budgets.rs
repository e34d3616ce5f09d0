//! The writes that bring the PodDisruptionBudgets this tool creates for
//! governed Deployments that ship none to what [`crate::engine::budgets::plan`]
//! planned.

use serde_json::{Value, json};

use super::objects;
use crate::engine::Kind;
use crate::engine::budgets::Action;

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
