//! The writes that bring the PodDisruptionBudgets this tool creates for
//! governed Deployments that ship none to what [`crate::engine::budgets::plan`]
//! planned.

use kube::api::{DeleteParams, PostParams, Preconditions};
use serde_json::{Value, json};

use super::objects;
use crate::engine::Kind;
use crate::engine::budgets::Action;

/// Sends one planned write (a create as [`objects::FIELD_MANAGER`], an
/// update or delete only of the version read: a concurrent change is a
/// conflict); the PDB it regards (for its Event).
pub async fn write(client: &kube::Client, action: &Action) -> Result<Value, kube::Error> {
    let kind = Kind::PodDisruptionBudget;
    let (Action::Create(pdb) | Action::Update { current: pdb, .. } | Action::Delete(pdb)) = action;
    let meta = &pdb["metadata"];
    let api = objects::api(client, kind, meta["namespace"].as_str().unwrap_or_default());
    match action {
        Action::Create(_) => {
            let params = PostParams {
                field_manager: Some(objects::FIELD_MANAGER.to_string()),
                ..Default::default()
            };
            let object = serde_json::from_value(pdb.clone()).map_err(kube::Error::SerdeError)?;
            let created = api.create(&params, &object).await?;
            serde_json::to_value(&created).map_err(kube::Error::SerdeError)
        }
        Action::Update { spec, .. } => {
            let patch: json_patch::Patch = serde_json::from_value(json!([
                {"op": "test", "path": "/metadata/resourceVersion",
                 "value": meta["resourceVersion"]},
                {"op": "replace", "path": "/spec", "value": spec},
            ]))
            .map_err(kube::Error::SerdeError)?;
            objects::patch(client, kind, pdb, &patch, objects::FIELD_MANAGER).await
        }
        Action::Delete(_) => {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version: meta["resourceVersion"].as_str().map(String::from),
                    uid: None,
                }),
                ..Default::default()
            };
            let name = meta["name"].as_str().unwrap_or_default();
            api.delete(name, &params).await?;
            Ok(pdb.clone())
        }
    }
}
