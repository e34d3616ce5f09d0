//! The memory budget: bytes of request bodies in flight, across every
//! connection (docs/server.md, "Limits"). A body is charged as its bytes
//! arrive (never from what its `Content-Length` announces), until its
//! review is answered. A quarter is kept for small bodies (at most
//! [`SMALL_BODY_BYTES`], as ordinary reviews are): big bodies that stall
//! can spend the rest, never the reserve. Waiting does not queue: a small
//! review never waits behind a big body that is itself waiting.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// Default budget: two bodies of the largest accepted size, with room for
/// normal reviews beside them.
pub const DEFAULT_BUDGET_BYTES: usize = 16 * 1024 * 1024;

/// How long a request waits for budget by default.
pub const DEFAULT_BUDGET_WAIT: Duration = Duration::from_secs(1);

/// A body of at most this many bytes may draw on the reserve.
pub const SMALL_BODY_BYTES: usize = 256 * 1024;

#[derive(Clone, Debug)]
pub struct Budget {
    bytes: Arc<Semaphore>,
    /// Kept for small bodies ([`SMALL_BODY_BYTES`]): a quarter of the total.
    reserve: Arc<Semaphore>,
    /// One review of a large body at a time: parsing can take ten times
    /// the body's size (e.g. millions of nested `[]`).
    large: Arc<Semaphore>,
    released: Arc<Notify>,
    total: usize,
    wait: Duration,
}

impl Default for Budget {
    fn default() -> Budget {
        Budget::new(DEFAULT_BUDGET_BYTES, DEFAULT_BUDGET_WAIT)
    }
}

/// Bytes held from the budget (its shared part and its reserve); given
/// back on drop.
#[derive(Debug)]
pub struct Charge {
    permit: Option<OwnedSemaphorePermit>,
    reserved: Option<OwnedSemaphorePermit>,
    released: Arc<Notify>,
}

impl Drop for Charge {
    fn drop(&mut self) {
        let held = self.permit.take().is_some() | self.reserved.take().is_some();
        if held {
            self.released.notify_waiters();
        }
    }
}

fn merged(mine: &mut Option<OwnedSemaphorePermit>, theirs: Option<OwnedSemaphorePermit>) {
    match (mine.as_mut(), theirs) {
        (Some(m), Some(t)) => m.merge(t),
        (None, t) => *mine = t,
        (Some(_), None) => {}
    }
}

impl Charge {
    fn merge(&mut self, mut other: Charge) {
        merged(&mut self.permit, other.permit.take());
        merged(&mut self.reserved, other.reserved.take());
    }
}

impl Budget {
    pub fn new(total_bytes: usize, wait: Duration) -> Budget {
        let total = total_bytes.clamp(1, u32::MAX as usize);
        let reserve = total / 4;
        Budget {
            bytes: Arc::new(Semaphore::new(total - reserve)),
            reserve: Arc::new(Semaphore::new(reserve)),
            large: Arc::new(Semaphore::new(1)),
            released: Arc::new(Notify::new()),
            total,
            wait,
        }
    }

    /// An empty charge to add to.
    pub fn none(&self) -> Charge {
        Charge {
            permit: None,
            reserved: None,
            released: self.released.clone(),
        }
    }

    /// Charges `bytes` (at most the whole budget) for a body that stays
    /// small (`small`: it may draw on the reserve), waiting up to the wait
    /// time; `None` when the budget stays spent.
    pub async fn charge(&self, bytes: usize, small: bool) -> Option<Charge> {
        let n = bytes.min(self.total) as u32;
        if n == 0 {
            return Some(self.none());
        }
        let deadline = tokio::time::Instant::now() + self.wait;
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            let shared = self.bytes.clone().try_acquire_many_owned(n);
            let (permit, reserved) = match shared {
                Ok(p) => (Some(p), None),
                Err(_) if small => (None, self.reserve.clone().try_acquire_many_owned(n).ok()),
                Err(_) => (None, None),
            };
            if permit.is_some() || reserved.is_some() {
                return Some(Charge {
                    permit,
                    reserved,
                    released: self.released.clone(),
                });
            }
            tokio::select! {
                _ = released => {}
                _ = tokio::time::sleep_until(deadline) => return None,
            }
        }
    }

    /// Adds `bytes` to `charge` (`small`: as for [`Budget::charge`]); false
    /// when the budget stays spent.
    pub async fn add(&self, charge: &mut Charge, bytes: usize, small: bool) -> bool {
        match self.charge(bytes, small).await {
            Some(more) => {
                charge.merge(more);
                true
            }
            None => false,
        }
    }

    /// Waits for the turn to review a large body (its bytes are already
    /// charged, so the wait is bounded by the budget: at most
    /// `total / size` large bodies wait).
    pub async fn large_review(&self) -> Option<OwnedSemaphorePermit> {
        self.large.clone().acquire_owned().await.ok()
    }

    /// Bytes not charged now (the reserve included).
    pub fn available(&self) -> usize {
        self.bytes.available_permits() + self.reserve.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_small_charge_passes_beside_a_waiting_big_one() {
        let budget = Budget::new(100, Duration::from_millis(300));
        let held = budget.charge(60, false).await.unwrap();
        let b = budget.clone();
        let big = tokio::spawn(async move { b.charge(50, false).await.is_some() });
        tokio::task::yield_now().await;
        assert!(
            budget.charge(10, false).await.is_some(),
            "small one not queued"
        );
        assert!(!big.await.unwrap(), "big one refused after the wait");
        drop(held);
        assert_eq!(budget.available(), 100);
        let mut c = budget.charge(75, true).await.unwrap();
        assert!(
            budget.add(&mut c, 25, true).await,
            "the reserve makes up the rest"
        );
        assert_eq!(budget.available(), 0);
        drop(c);
        assert_eq!(budget.available(), 100);
    }

    #[tokio::test]
    async fn a_waiting_charge_gets_released_bytes() {
        let budget = Budget::new(100, Duration::from_secs(30));
        let held = budget.charge(75, false).await.unwrap();
        let b = budget.clone();
        let waiting = tokio::spawn(async move { b.charge(75, false).await.is_some() });
        tokio::task::yield_now().await;
        drop(held);
        assert!(waiting.await.unwrap());
    }

    /// Big bodies that stall spend the shared part, never the reserve: a
    /// small body is still charged at once.
    #[tokio::test]
    async fn the_reserve_is_kept_for_small_bodies() {
        let budget = Budget::new(100, Duration::from_millis(50));
        let big = budget.charge(75, false).await.unwrap();
        assert!(
            budget.charge(1, false).await.is_none(),
            "no more for a big body"
        );
        let small = budget.charge(25, true).await.expect("the reserve");
        assert!(
            budget.charge(1, true).await.is_none(),
            "the reserve spent too"
        );
        drop((big, small));
        assert_eq!(budget.available(), 100);
    }

    #[tokio::test]
    async fn large_reviews_take_turns() {
        let budget = Budget::default();
        let first = budget.large_review().await.unwrap();
        let b = budget.clone();
        let second = tokio::spawn(async move { b.large_review().await.is_some() });
        tokio::task::yield_now().await;
        assert!(!second.is_finished(), "the second waits for the first");
        drop(first);
        assert!(second.await.unwrap());
    }
}
