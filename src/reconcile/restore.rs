//! `knative-ha-webhook restore --namespace NS` (run by `cmd::restore`;
//! docs/operations.md): every governed object of one namespace back to its
//! release values ([`crate::engine::restore::restore`]), written as the
//! reconciler writes ([`objects::write_retrying`]).

use std::ops::ControlFlow;

use json_patch::jsonptr::PointerBuf;
use json_patch::{Patch, PatchOperation, TestOperation};
use serde::Serialize;
use serde_json::Value;

use super::error::{self, ReconcileError};
use super::objects::{self, RetryError};
use crate::engine::{self, Kind, Snapshot};
use crate::errors::InWords;

/// The field manager of `restore`'s writes.
pub const FIELD_MANAGER: &str = "knative-ha-webhook-restore";

/// Errors that stop `restore` before it looked at every object (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error(transparent)]
    Kube(#[from] crate::kubeclient::KubeClientError),
    #[error("restoring namespace {namespace}")]
    List {
        namespace: String,
        #[source]
        source: ReconcileError,
    },
    #[error(
        "namespace {0:?} has no governed object (Deployment, HorizontalPodAutoscaler, PodDisruptionBudget, config-leader-election): nothing to restore; is it the right namespace?"
    )]
    Empty(String),
}

/// Why one object could not be restored (the report's `error`).
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The engine cannot compute the object's restore patch.
    #[error(transparent)]
    Engine(engine::EngineError),
    /// Reading the object again failed, or every attempt conflicted.
    #[error(transparent)]
    Retry(RetryError),
    /// The API server refused the patch (its answer, in words).
    #[error(transparent)]
    Patch(InWords),
    /// A policy still governs the namespace: the webhook put its changes
    /// back at admission of the write.
    #[error(
        "the webhook changed it again at admission: a policy still governs the namespace (delete it, or uninstall the webhook, first)"
    )]
    Readmitted,
}

/// One object put back (or that would be, in a dry run).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Restored {
    pub kind: &'static str,
    pub name: String,
    pub changes: Vec<crate::engine::Change>,
    /// Why it could not be written (then exit 2).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What `restore` did to one namespace.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RestoreReport {
    pub namespace: String,
    pub dry_run: bool,
    /// Governed objects looked at.
    pub objects: usize,
    /// The objects that are (or would be) changed.
    pub restored: Vec<Restored>,
}

impl RestoreReport {
    /// True when some object could not be restored.
    pub fn failed(&self) -> bool {
        self.restored.iter().any(|r| r.error.is_some())
    }

    /// 0 done (or nothing to do), 1 a dry run with something to restore,
    /// 2 some object failed (`audit`'s codes).
    pub fn exit_code(&self) -> u8 {
        if self.failed() {
            2
        } else if self.dry_run && !self.restored.is_empty() {
            1
        } else {
            0
        }
    }

    /// One line per change, then a summary.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for r in &self.restored {
            for c in &r.changes {
                out.push_str(&format!("{}  {}  {c}\n", self.namespace, r.kind));
            }
            if let Some(e) = &r.error {
                out.push_str(&format!(
                    "{}  {}  {}: not restored: {e}\n",
                    self.namespace, r.kind, r.name
                ));
            }
        }
        let n = self.restored.len();
        let failed = self.restored.iter().filter(|r| r.error.is_some()).count();
        out.push_str(&match (n, self.dry_run) {
            (0, _) => format!(
                "nothing to restore: the {} governed objects of {} carry no change of the webhook's\n",
                self.objects, self.namespace
            ),
            (n, true) => format!(
                "dry run: would restore {n} of {} governed objects in {}\n",
                self.objects, self.namespace
            ),
            (n, false) => format!(
                "restored {} of {} governed objects in {}{}\n",
                n - failed,
                self.objects,
                self.namespace,
                if failed > 0 {
                    format!("; {failed} failed")
                } else {
                    String::new()
                }
            ),
        });
        out
    }
}

/// Restores the governed objects of `namespace` (only computes with
/// `dry_run`).
pub async fn restore_namespace(
    client: &kube::Client,
    namespace: &str,
    dry_run: bool,
) -> Result<RestoreReport, RestoreError> {
    let listed = objects::list_namespace(client, namespace)
        .await
        .map_err(|source| RestoreError::List {
            namespace: namespace.to_string(),
            source,
        })?;
    if listed.objects.is_empty() {
        return Err(RestoreError::Empty(namespace.to_string()));
    }
    let mut report = RestoreReport {
        namespace: namespace.to_string(),
        dry_run,
        objects: listed.objects.len(),
        restored: Vec::new(),
    };
    for change in engine::budgets::plan(&Snapshot::default(), namespace, &listed.objects) {
        let error = match dry_run {
            true => None,
            false => super::budgets::write(client, &change.action).await.err(),
        };
        report.restored.push(Restored {
            kind: Kind::PodDisruptionBudget.as_str(),
            name: change.name,
            changes: vec![change.change],
            error: error.map(|e| crate::kubeclient::describe(&e)),
        });
    }
    for object in &listed.objects {
        let kind = Kind::of(object).map_or("object", Kind::as_str);
        let name = object["metadata"]["name"].as_str().unwrap_or("");
        let (changes, error) = match restoring(namespace, object) {
            Err(e) => (Vec::new(), Some(crate::errors::chain(&e))),
            Ok(mutation) if mutation.is_empty() => continue,
            Ok(mutation) if dry_run => (mutation.changes, None),
            Ok(mutation) => {
                let written = write(client, namespace, object, name).await;
                (
                    mutation.changes,
                    written.err().map(|e| crate::errors::chain(&e)),
                )
            }
        };
        report.restored.push(Restored {
            kind,
            name: name.to_string(),
            changes,
            error,
        });
    }
    Ok(report)
}

/// What `restore` changes in `object`, as it is.
fn restoring(namespace: &str, object: &Value) -> Result<engine::Mutation, engine::EngineError> {
    let input = engine::Input::update(namespace, object);
    Ok(engine::outcome(engine::Answering::Restore, &input)?.mutation)
}

/// Writes the restore patch of `object`, guarded by a `test` of its
/// resourceVersion, reading it again after a conflict
/// ([`objects::write_retrying`]).
async fn write(
    client: &kube::Client,
    namespace: &str,
    object: &Value,
    name: &str,
) -> Result<(), WriteError> {
    let Some(kind) = Kind::of(object) else {
        return Ok(());
    };
    let mut attempts = RestoreAttempts {
        client,
        kind,
        namespace,
    };
    objects::write_retrying(client, (kind, namespace, name), object, &mut attempts)
        .await
        .map_err(WriteError::Retry)?
        .unwrap_or(Ok(()))
}

/// One attempt of [`write`]: the restore patch of the object as it is.
struct RestoreAttempts<'a> {
    client: &'a kube::Client,
    kind: Kind,
    namespace: &'a str,
}

impl objects::Attempts for RestoreAttempts<'_> {
    type Answer = Result<(), WriteError>;

    async fn attempt(&mut self, current: &Value, _: u32) -> ControlFlow<Self::Answer, String> {
        let mutation = match restoring(self.namespace, current) {
            Ok(mutation) if mutation.is_empty() => return ControlFlow::Break(Ok(())),
            Ok(mutation) => mutation,
            Err(e) => return ControlFlow::Break(Err(WriteError::Engine(e))),
        };
        let rv = &current["metadata"]["resourceVersion"];
        let test = PatchOperation::Test(TestOperation {
            path: PointerBuf::from_tokens(["metadata", "resourceVersion"]),
            value: rv.as_str().unwrap_or("").into(),
        });
        let patch = Patch(std::iter::once(test).chain(mutation.patch.0).collect());
        match objects::patch(self.client, self.kind, current, &patch, FIELD_MANAGER).await {
            // Still carrying the webhook's changes: a policy still governs
            // the namespace and the webhook applied it again at admission.
            Ok(written) => ControlFlow::Break(match restoring(self.namespace, &written) {
                Ok(mutation) if mutation.is_empty() => Ok(()),
                _ => Err(WriteError::Readmitted),
            }),
            Err(e) if error::is_precondition_failed(&e) => {
                ControlFlow::Continue(crate::kubeclient::reason(&e))
            }
            Err(e) => ControlFlow::Break(Err(WriteError::Patch(InWords(
                crate::kubeclient::describe(&e),
            )))),
        }
    }
}

/// With `--undo-unclaimed`, the reconciler's plan for an object of a
/// namespace no policy object names any more (its policy deleted):
/// [`engine::restore::undo_unclaimed`]'s
/// patch as a [`super::Drift`]. With `pod_templates == false`, a patch that
/// touches the pod template, or of `config-leader-election` (its keys take
/// effect on the restart the template change makes), is held back whole: no
/// half restore. None when the object carries no record (or nothing changes).
pub fn plan_unclaimed(
    namespace: &str,
    object: &Value,
    pod_templates: bool,
) -> Result<Option<super::Drift>, engine::EngineError> {
    let outcome = engine::outcome(
        engine::Answering::Unclaimed,
        &engine::Input::update(namespace, object),
    )?;
    let Some(kind) = Kind::of(object).filter(|_| !outcome.mutation.is_empty()) else {
        return Ok(None);
    };
    let meta = &object["metadata"];
    let name = meta["name"].as_str().unwrap_or_default().to_string();
    let patch = outcome.mutation.patch;
    let rolls = patch.0.iter().any(super::plan::touches_pod_template);
    let whole = rolls || (kind == Kind::ConfigMap && name == engine::LEADER_ELECTION_CONFIGMAP);
    let (patch, held_back) = match pod_templates || !whole {
        true => (patch, 0),
        false => (Patch(Vec::new()), patch.0.len()),
    };
    Ok(Some(super::Drift {
        kind,
        namespace: namespace.to_string(),
        name,
        resource_version: meta["resourceVersion"].as_str().map(str::to_string),
        changes: outcome
            .mutation
            .changes
            .into_iter()
            .map(|change| super::ChangeLine {
                change,
                rolls_pods: rolls,
            })
            .collect(),
        patch,
        held_back,
    }))
}
