//! Writes what the state decided to report: merge patches of
//! HighAvailabilityPolicy `/status`, Events on policy ConfigMaps and their
//! last-valid annotation.
//! Runs apart from the watchers so a slow API server never delays policy
//! updates.

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use super::status::{ObservedStatus, ReadyStatus, status_patch};
use super::{ClusterError, ClusterMetrics, Msg};
use crate::telemetry::clip;

#[derive(Debug)]
pub(crate) enum WriteReq {
    Status {
        uid: String,
        name: String,
        desired: ReadyStatus,
        observed: ObservedStatus,
    },
    Event {
        reference: ObjectReference,
        desired: ReadyStatus,
    },
    /// The last-valid annotation of a policy ConfigMap (its value).
    Annotation {
        uid: String,
        name: String,
        value: String,
    },
}

pub(crate) async fn run(
    crs: Api<DynamicObject>,
    cms: Api<ConfigMap>,
    recorder: Recorder,
    mut rx: UnboundedReceiver<WriteReq>,
    tx: UnboundedSender<Msg>,
    metrics: ClusterMetrics,
) -> Result<(), ClusterError> {
    // Objects whose last status write failed: warn once per failure streak.
    let mut failing = std::collections::HashSet::new();
    while let Some(req) = rx.recv().await {
        match req {
            WriteReq::Status {
                uid,
                name,
                desired,
                observed,
            } => {
                let patch = status_patch(&desired, &observed, Timestamp::now());
                match crs
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => {
                        failing.remove(&uid);
                        tracing::debug!(
                            policy = %name,
                            ready = desired.status,
                            reason = desired.reason,
                            "status written"
                        )
                    }
                    Err(err) => {
                        metrics.write_errors.inc();
                        if failing.insert(uid.clone()) {
                            tracing::warn!(policy = %name, error = %crate::errors::Chain(&err), "status write failed; will retry");
                        } else {
                            tracing::debug!(policy = %name, error = %crate::errors::Chain(&err), "status write still failing");
                        }
                        tx.send(Msg::WriteFailed(uid))
                            .map_err(|_| ClusterError::ChannelClosed("watch"))?;
                    }
                }
            }
            WriteReq::Annotation { uid, name, value } => {
                let patch = serde_json::json!({"metadata": {"annotations": {
                    super::configmaps::LAST_VALID_ANNOTATION: value,
                }}});
                match cms
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => tracing::debug!(configmap = %name, "last valid version recorded"),
                    Err(err) => {
                        metrics.write_errors.inc();
                        tracing::warn!(configmap = %name, error = %crate::errors::Chain(&err), "recording the last valid version failed; will retry");
                        tx.send(Msg::WriteFailed(uid))
                            .map_err(|_| ClusterError::ChannelClosed("watch"))?;
                    }
                }
            }
            WriteReq::Event { reference, desired } => {
                let name = reference.name.clone().unwrap_or_default();
                if let Err(err) = recorder.publish(&event(&desired), &reference).await {
                    metrics.write_errors.inc();
                    tracing::warn!(configmap = %name, error = %crate::errors::Chain(&err), "event write failed");
                }
            }
        }
    }
    Err(ClusterError::ChannelClosed("write"))
}

/// The Event saying what the `Ready` condition says.
fn event(desired: &ReadyStatus) -> Event {
    Event {
        type_: if desired.status == "True" {
            EventType::Normal
        } else {
            EventType::Warning
        },
        reason: desired.reason.to_string(),
        note: Some(clip(&desired.message, NOTE_BYTES - 32)),
        action: "ValidatePolicy".to_string(),
        secondary: None,
    }
}

/// Events carry at most 1 kB of note; [`clip`] leaves room for its note
/// of what was left out.
const NOTE_BYTES: usize = 1024;
