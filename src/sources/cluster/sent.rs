//! What the state asked of the writer (status patches, Events, last-valid
//! annotations), so that each is sent once and a failed one is retried on
//! the retry tick only.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::configmaps;
use super::merge::{Origin, PolicyObject, Verdict};
use super::source_state::Tracked;
use super::status::{self, ReadyStatus};
use super::writer::WriteReq;

/// What was asked of the writer, so that each patch or Event is sent once.
#[derive(Debug, Default)]
pub(crate) struct Sent {
    /// Status patches sent and not yet seen on the object, per uid.
    pub status: HashMap<String, ReadyStatus>,
    /// Status writes that failed; retried on the next retry tick only (not
    /// at once, so an unreachable API server is not hammered).
    pub failed: HashSet<String>,
    /// The last Event written per ConfigMap uid.
    pub event: HashMap<String, ReadyStatus>,
    /// Last-valid annotations sent and not yet seen, per ConfigMap uid.
    pub annotation: HashMap<String, status::LastValid>,
}

impl Sent {
    /// The status patch a HighAvailabilityPolicy needs, if any: none when
    /// its status already says `desired`, when the same patch was sent, or
    /// when its last write failed (retried on the next retry tick).
    pub fn status_write(&mut self, t: &Tracked, desired: ReadyStatus) -> Option<WriteReq> {
        let obj = &t.object;
        if t.status.matches(&desired) {
            self.status.remove(&obj.uid);
            self.failed.remove(&obj.uid);
            return None;
        }
        if self.failed.contains(&obj.uid) || self.status.get(&obj.uid) == Some(&desired) {
            return None;
        }
        self.status.insert(obj.uid.clone(), desired.clone());
        Some(WriteReq::Status {
            uid: obj.uid.clone(),
            name: obj.name.clone(),
            desired,
            observed: t.status.clone(),
        })
    }

    /// The last-valid annotation a policy ConfigMap needs, if any: none
    /// when it already carries `record` (or there is none to write), when
    /// the same was sent, or when its last write failed.
    pub fn annotation_write(
        &mut self,
        t: &Tracked,
        record: Option<status::LastValid>,
    ) -> Option<WriteReq> {
        let obj = &t.object;
        let record = record?;
        if t.status.last_valid.as_ref() == Some(&record) {
            self.annotation.remove(&obj.uid);
            self.failed.remove(&obj.uid);
            return None;
        }
        if self.failed.contains(&obj.uid) || self.annotation.get(&obj.uid) == Some(&record) {
            return None;
        }
        self.annotation.insert(obj.uid.clone(), record.clone());
        Some(WriteReq::Annotation {
            uid: obj.uid.clone(),
            name: obj.name.clone(),
            value: configmaps::annotation(&record),
        })
    }

    /// The Event a policy ConfigMap needs, if it differs from the last one.
    pub fn event_write(&mut self, obj: &PolicyObject, desired: ReadyStatus) -> Option<WriteReq> {
        if self.event.get(&obj.uid) == Some(&desired) {
            return None;
        }
        self.event.insert(obj.uid.clone(), desired.clone());
        Some(WriteReq::Event {
            reference: configmaps::reference(obj),
            desired,
        })
    }

    /// Forgets what was sent for objects that are gone (no verdict in
    /// `live`).
    pub fn forget_gone(&mut self, live: &BTreeMap<(Origin, String), Verdict>) {
        let has = |origin, uid: &String| live.contains_key(&(origin, uid.clone()));
        self.status.retain(|uid, _| has(Origin::Resource, uid));
        self.failed
            .retain(|uid| has(Origin::Resource, uid) || has(Origin::ConfigMap, uid));
        self.event.retain(|uid, _| has(Origin::ConfigMap, uid));
        self.annotation.retain(|uid, _| has(Origin::ConfigMap, uid));
    }
}
