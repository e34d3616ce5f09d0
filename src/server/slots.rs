//! Connection slots: a bounded set of connections in one phase (TLS
//! handshake, or established) that evicts one ([`Evict`]) when full, so a
//! new client is never starved by held connections.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// When to evict, for a full set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Evict {
    /// The oldest entry.
    Oldest,
    /// The entry idle the longest, else the one busy the longest.
    LongestIdle,
}

/// Request activity of one connection (shared with its service).
#[derive(Debug)]
pub(crate) struct Activity {
    epoch: Instant,
    /// Milliseconds since `epoch` at the start or end of the last request.
    last_request_ms: AtomicU64,
    /// Requests in progress (handler running).
    active: AtomicUsize,
    /// Requests seen so far.
    requests: AtomicU64,
}

impl Activity {
    pub fn new(epoch: Instant) -> Activity {
        Activity {
            epoch,
            last_request_ms: AtomicU64::new(0),
            active: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    pub fn request_started(&self) {
        self.requests.fetch_add(1, Ordering::SeqCst);
        self.active.fetch_add(1, Ordering::SeqCst);
        self.last_request_ms.store(self.now_ms(), Ordering::SeqCst);
    }

    pub fn request_ended(&self) {
        self.last_request_ms.store(self.now_ms(), Ordering::SeqCst);
        self.active.fetch_sub(1, Ordering::SeqCst);
    }

    /// True once a complete request head was received.
    pub fn seen_request(&self) -> bool {
        self.requests.load(Ordering::SeqCst) > 0
    }

    /// Time since the start or end of the last request (since accept
    /// before the first one).
    pub fn since_last_request(&self) -> Duration {
        let last = self.last_request_ms.load(Ordering::SeqCst);
        Duration::from_millis(self.now_ms().saturating_sub(last))
    }

    /// How long no request has been in progress (zero while one is).
    pub fn idle(&self) -> Duration {
        if self.active.load(Ordering::SeqCst) > 0 {
            return Duration::ZERO;
        }
        self.since_last_request()
    }
}

struct Entry {
    kill: Arc<Notify>,
    activity: Option<Arc<Activity>>,
}

/// A bounded set of connections.
pub(crate) struct Slots {
    cap: usize,
    evict: Evict,
    entries: Mutex<(u64, BTreeMap<u64, Entry>)>,
}

/// A connection's place in a [`Slots`]; freed on drop. `kill` is notified
/// when the connection was evicted.
pub(crate) struct Slot {
    id: u64,
    slots: Arc<Slots>,
    pub kill: Arc<Notify>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Ok(mut guard) = self.slots.entries.lock() {
            guard.1.remove(&self.id);
        }
    }
}

impl Slots {
    pub fn new(cap: usize, evict: Evict) -> Arc<Slots> {
        Arc::new(Slots {
            cap: cap.max(1),
            evict,
            entries: Mutex::new((0, BTreeMap::new())),
        })
    }

    /// Takes a slot, evicting another entry when the set is full. `None`
    /// when the set is full and nothing can be evicted.
    pub fn admit(self: &Arc<Slots>, activity: Option<Arc<Activity>>) -> Option<Slot> {
        let mut guard = self.entries.lock().ok()?;
        let (next, entries) = &mut *guard;
        if entries.len() >= self.cap {
            let victim = match self.evict {
                Evict::Oldest => entries.keys().next().copied(),
                // Idle ones first (longest idle); when every connection
                // has a request in progress, the one busy the longest
                // (a slow body, not a review, which takes milliseconds).
                Evict::LongestIdle => entries
                    .iter()
                    .filter_map(|(id, e)| {
                        let a = e.activity.as_ref()?;
                        Some((a.idle() > Duration::ZERO, a.since_last_request(), *id))
                    })
                    .max()
                    .map(|(_, _, id)| id),
            };
            // The victim's slot is freed here, so the set never exceeds its cap.
            let entry = entries.remove(&victim?)?;
            entry.kill.notify_one();
        }
        *next += 1;
        let id = *next;
        let kill = Arc::new(Notify::new());
        entries.insert(
            id,
            Entry {
                kill: kill.clone(),
                activity,
            },
        );
        Some(Slot {
            id,
            slots: self.clone(),
            kill,
        })
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.lock().unwrap().1.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oldest_handshake_is_dropped_when_full() {
        let slots = Slots::new(2, Evict::Oldest);
        let a = slots.admit(None).unwrap();
        let _b = slots.admit(None).unwrap();
        let _c = slots.admit(None).unwrap();
        assert_eq!(slots.len(), 2);
        // `a` was told to close; a notify_one permit is stored for it.
        {
            let notified = a.kill.notified();
            futures::pin_mut!(notified);
            assert!(futures::FutureExt::now_or_never(notified).is_some());
        }
        drop(a);
        assert_eq!(slots.len(), 2);
    }

    #[test]
    fn longest_idle_is_shed_and_busy_ones_are_kept() {
        let epoch = Instant::now() - Duration::from_secs(100);
        let slots = Slots::new(2, Evict::LongestIdle);
        let busy = Arc::new(Activity::new(epoch));
        busy.request_started();
        let idle = Arc::new(Activity::new(epoch));
        let busy_slot = slots.admit(Some(busy.clone())).unwrap();
        let idle_slot = slots.admit(Some(idle)).unwrap();
        let third = slots.admit(Some(Arc::new(Activity::new(Instant::now()))));
        assert!(third.is_some(), "the idle connection made room");
        let n = idle_slot.kill.notified();
        futures::pin_mut!(n);
        assert!(futures::FutureExt::now_or_never(n).is_some());
        let n = busy_slot.kill.notified();
        futures::pin_mut!(n);
        assert!(futures::FutureExt::now_or_never(n).is_none());
    }

    #[test]
    fn when_every_connection_is_busy_the_longest_busy_makes_room() {
        let slots = Slots::new(2, Evict::LongestIdle);
        let slow = Arc::new(Activity::new(Instant::now() - Duration::from_secs(9)));
        slow.request_started();
        let _slow_slot = slots.admit(Some(slow.clone())).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let fast = Arc::new(Activity::new(Instant::now() - Duration::from_secs(5)));
        fast.request_started();
        let fast_slot = slots.admit(Some(fast)).unwrap();
        let third = slots.admit(Some(Arc::new(Activity::new(Instant::now()))));
        assert!(third.is_some());
        let n = fast_slot.kill.notified();
        futures::pin_mut!(n);
        assert!(
            futures::FutureExt::now_or_never(n).is_none(),
            "the newer request is kept"
        );
        assert_eq!(slots.len(), 2);
    }
}
