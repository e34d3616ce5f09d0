//! What the state keeps per policy source: every object a watcher has
//! listed or seen change (a relist buffered until it completes), each with
//! its last valid version.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::merge::PolicyObject;
use super::status::ObservedStatus;
use super::{Observed, WatchEvent};

/// A policy object plus what it currently carries in `status`.
#[derive(Clone, Debug)]
pub(crate) struct Tracked {
    pub object: PolicyObject,
    pub status: ObservedStatus,
}

/// Folds a newly observed version into the object's state: a valid version
/// replaces the last valid one; an invalid one keeps the one this process
/// saw, else the one recorded in the object (already in `obs`).
pub(crate) fn fold(prev: Option<&Tracked>, obs: Observed) -> Tracked {
    let Observed {
        mut object,
        parsed,
        status,
    } = obs;
    match parsed {
        Ok(policy) => {
            object.last_valid = Some(Arc::new(policy));
            object.last_valid_refusal = None;
            object.error = None;
        }
        Err(message) => {
            if let Some(prev) = prev.filter(|p| p.object.last_valid.is_some()) {
                object.last_valid = prev.object.last_valid.clone();
                object.last_valid_generation = prev.object.last_valid_generation;
                object.last_valid_refusal = prev.object.last_valid_refusal.clone();
            }
            object.error = Some(message.to_string());
        }
    }
    Tracked { object, status }
}

/// The policy objects of one source: `live` is what is known; `pending`
/// buffers a (re)list until it completes (each listed version is folded
/// into the last one known under its key, which a reflector store, holding
/// only the objects, would not keep).
#[derive(Debug, Default)]
pub(crate) struct SourceState {
    pub live: BTreeMap<String, Tracked>,
    pub pending: Option<BTreeMap<String, Tracked>>,
    pub synced: bool,
}

impl SourceState {
    /// Applies one watcher change, each version [`fold`]ed into the one
    /// already known under its key (the pending relist's first, then the
    /// live one).
    pub fn apply(&mut self, change: WatchEvent) {
        match change {
            WatchEvent::Init => self.pending = Some(BTreeMap::new()),
            WatchEvent::InitApply(key, observed) => {
                let prev = self
                    .pending
                    .as_ref()
                    .and_then(|p| p.get(&key))
                    .or_else(|| self.live.get(&key));
                let value = fold(prev, *observed);
                self.pending
                    .get_or_insert_with(BTreeMap::new)
                    .insert(key, value);
            }
            WatchEvent::Apply(key, observed) => {
                let value = fold(self.live.get(&key), *observed);
                self.live.insert(key, value);
            }
            WatchEvent::InitDone => {
                self.live = self.pending.take().unwrap_or_default();
                self.synced = true;
            }
            WatchEvent::Delete(key) => {
                self.live.remove(&key);
            }
            WatchEvent::Missing => {
                self.live.clear();
                self.pending = None;
                self.synced = true;
            }
        }
    }
}
