//! Events on the objects the reconciler writes: what changed and why, on the
//! object itself. The Event is written after the object; a failure to write
//! it is logged and never fails the run.
//!
//! Each write gets an Event of its own (`events.k8s.io/v1`, created under a
//! name unique to the write), carrying that write's changes. kube's
//! `Recorder` is not used: it folds every Event with the same object, reason
//! and action into the first one's series (count 2, the first message), so a
//! second write to an object showed the first write's changes.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use serde_json::Value;

/// The Event's reason on every written object.
pub const REASON: &str = "HighAvailabilityApplied";
/// The Event's action.
pub const ACTION: &str = "Reconcile";
/// The Event's reporting controller.
pub const CONTROLLER: &str = "knative-ha-webhook";
/// An Event note holds at most 1 kB.
const NOTE_BYTES: usize = 1024;
/// An object name is at most 253 characters; so is the Event's name, which
/// adds `.` and up to 32 hex digits of the write's time.
const NAME_BYTES: usize = 253 - 33;

/// Writes the Events of one reconciler.
#[derive(Clone)]
pub struct EventWriter {
    client: kube::Client,
    /// The Lease holder's identity (e.g. the pod).
    instance: String,
}

/// The reference an Event about `object` carries (apiVersion, kind,
/// namespace, name, uid).
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

/// The Event's name: the object's (clipped), then the write's time in
/// nanoseconds as hex, as client-go names Events: one per write.
pub fn name(object_name: &str, at: Timestamp) -> String {
    let mut end = object_name.len().min(NAME_BYTES);
    while !object_name.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}.{:x}", &object_name[..end], at.as_nanosecond())
}

/// The reason of the Event on a KnativeServing or KnativeEventing whose
/// fields the policy overrides: where a user describing it looks.
pub const OVERRIDDEN: &str = "OverriddenByPolicy";

/// The Event of one write to `regarding`, made at `at` by `instance`, whose
/// changes are `changes` (the log line's text), clipped to what a note holds.
pub fn event(regarding: ObjectReference, changes: &str, instance: &str, at: Timestamp) -> Event {
    let object_name = regarding.name.clone().unwrap_or_else(|| CONTROLLER.into());
    Event {
        metadata: ObjectMeta {
            namespace: regarding.namespace.clone(),
            name: Some(name(&object_name, at)),
            ..ObjectMeta::default()
        },
        reason: Some(REASON.into()),
        type_: Some("Normal".into()),
        action: Some(ACTION.into()),
        note: Some(crate::telemetry::clip(changes, NOTE_BYTES - 32)),
        event_time: Some(MicroTime(at)),
        regarding: Some(regarding),
        reporting_controller: Some(CONTROLLER.into()),
        reporting_instance: Some(instance.to_string()),
        ..Event::default()
    }
}

impl EventWriter {
    pub fn new(client: kube::Client, identity: &str) -> EventWriter {
        EventWriter {
            client,
            instance: identity.to_string(),
        }
    }

    /// Creates the Event of one write to `object`, whose changes are `changes`.
    pub async fn written(&self, object: &Value, changes: &str) {
        let event = event(reference(object), changes, &self.instance, Timestamp::now());
        self.create(event).await;
    }

    /// One Event per Knative Operator resource named in `overrides`, on
    /// that resource, listing its fields the policy overrides.
    pub async fn overridden(
        &self,
        namespace: &str,
        overrides: &[crate::knative_operator::Override],
    ) {
        let mut owners: Vec<&str> = overrides.iter().map(|o| o.owner.as_str()).collect();
        owners.dedup();
        for owner in owners {
            let (kind, name) = owner.split_once('/').unwrap_or((owner, ""));
            let lines: Vec<String> = overrides
                .iter()
                .filter(|o| o.owner == owner)
                .map(|o| format!("{}: {}; the policy's {} wins", o.field, o.theirs, o.ours))
                .collect();
            let note = format!(
                "the HighAvailabilityPolicy of namespace {namespace} overrides {}",
                lines.join("; ")
            );
            let regarding = ObjectReference {
                api_version: Some(crate::knative_operator::API_VERSION.into()),
                kind: Some(kind.to_string()),
                namespace: Some(namespace.to_string()),
                name: Some(name.to_string()),
                ..ObjectReference::default()
            };
            let event = Event {
                reason: Some(OVERRIDDEN.into()),
                ..event(regarding, &note, &self.instance, Timestamp::now())
            };
            self.create(event).await;
        }
    }

    async fn create(&self, event: Event) {
        let namespace = event.metadata.namespace.as_deref().unwrap_or_default();
        let regarding = event.regarding.clone().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        if let Err(err) = api.create(&PostParams::default(), &event).await {
            tracing::warn!(
                kind = regarding.kind.as_deref().unwrap_or(""),
                namespace = %namespace,
                name = regarding.name.as_deref().unwrap_or(""),
                error = %crate::errors::Chain(&err), "reconcile: event write failed"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;
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
        let at = Timestamp::from_second(1_700_000_000).unwrap();
        let note = "deployment/controller: spec.replicas 1 -> 3 (policy serving)";
        let e = super::event(r.clone(), note, "pod-a", at);
        assert_eq!(e.reason.as_deref(), Some(super::REASON));
        assert_eq!(e.action.as_deref(), Some(super::ACTION));
        assert_eq!(e.note.as_deref(), Some(note));
        assert_eq!(e.regarding.as_ref(), Some(&r));
        assert_eq!(e.metadata.namespace.as_deref(), Some("knative-serving"));
        assert_eq!(e.reporting_instance.as_deref(), Some("pod-a"));
        assert!(e.series.is_none(), "one write is one occurrence");
        let long = "x".repeat(5000);
        let clipped = super::event(r, &long, "pod-a", at).note.unwrap();
        assert!(clipped.len() <= 1024);
    }

    /// Two writes, two names (kube's Recorder folded the second into the
    /// first Event's series); a long object name is clipped to fit.
    #[test]
    fn each_write_gets_its_own_name() {
        let at = Timestamp::from_second(1_700_000_000).unwrap();
        let later = Timestamp::from_nanosecond(at.as_nanosecond() + 1).unwrap();
        assert_ne!(
            super::name("controller", at),
            super::name("controller", later)
        );
        assert!(super::name("controller", at).starts_with("controller."));
        let long = "a".repeat(253);
        assert!(super::name(&long, at).len() <= 253);
    }
}
