//! Events on the objects the reconciler writes: what changed and why, on the
//! object itself (`kubectl describe`, `kubectl get events`), for the operator
//! who asks "what did the webhook change here, when, and why". The Event is
//! written after the object; a failure to write it is logged and never fails
//! the run.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::Value;

/// The Event's reason on every written object.
pub const REASON: &str = "HighAvailabilityApplied";
/// The Event's action.
pub const ACTION: &str = "Reconcile";
/// An Event note holds at most 1 kB.
const NOTE_BYTES: usize = 1024;

/// The recorder of `identity` (the Lease holder's name, e.g. the pod).
pub fn recorder(client: kube::Client, identity: &str) -> Recorder {
    Recorder::new(
        client,
        Reporter {
            controller: "knative-ha-webhook".into(),
            instance: Some(identity.to_string()),
        },
    )
}

/// The reference an Event about `object` carries (apiVersion, kind,
/// namespace, name, uid, resourceVersion as read).
pub fn reference(object: &Value) -> ObjectReference {
    let text = |v: &Value| v.as_str().map(str::to_string);
    let meta = &object["metadata"];
    ObjectReference {
        api_version: text(&object["apiVersion"]),
        kind: text(&object["kind"]),
        namespace: text(&meta["namespace"]),
        name: text(&meta["name"]),
        uid: text(&meta["uid"]),
        ..ObjectReference::default()
    }
}

/// The Event for a written object whose changes are `changes` (the log
/// line's text), clipped to what a note holds.
pub fn event(changes: &str) -> Event {
    Event {
        type_: EventType::Normal,
        reason: REASON.into(),
        note: Some(crate::telemetry::clip(changes, NOTE_BYTES - 32)),
        action: ACTION.into(),
        secondary: None,
    }
}

/// Publishes the Event for `object`, written with `changes`.
pub async fn written(recorder: &Recorder, object: &Value, changes: &str) {
    let reference = reference(object);
    if let Err(err) = recorder.publish(&event(changes), &reference).await {
        tracing::warn!(
            kind = reference.kind.as_deref().unwrap_or(""),
            name = reference.name.as_deref().unwrap_or(""),
            error = %crate::errors::Chain(&err), "reconcile: event write failed"
        );
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn the_event_names_the_object_and_holds_the_changes_within_a_note() {
        let object = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"namespace": "knative-serving", "name": "controller", "uid": "u-1"}});
        let r = super::reference(&object);
        assert_eq!(r.api_version.as_deref(), Some("apps/v1"));
        assert_eq!(r.kind.as_deref(), Some("Deployment"));
        assert_eq!(r.namespace.as_deref(), Some("knative-serving"));
        assert_eq!(r.name.as_deref(), Some("controller"));
        assert_eq!(r.uid.as_deref(), Some("u-1"));
        let e = super::event("deployment/controller: spec.replicas 1 -> 3 (policy serving)");
        assert_eq!(e.reason, super::REASON);
        let long = "x".repeat(5000);
        assert!(super::event(&long).note.unwrap().len() <= 1024);
    }
}
