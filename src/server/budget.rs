//! The memory budget: bytes of request bodies in flight, across every
//! connection. A body is charged from its `Content-Length` (or chunk by
//! chunk without one) until its review is answered; a request that finds
//! the budget spent waits up to [`Budget::wait`] for it, then is refused
//! (503 with `Retry-After`).
//!
//! Large bodies are reviewed one at a time ([`Budget::large_review`]).
//!
//! Waiting does not queue: a small review never waits behind a big body
//! that is itself waiting, so normal reviews pass while big ones are
//! refused.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// Default budget: two bodies of the largest accepted size, with room for
/// normal reviews beside them.
pub const DEFAULT_BUDGET_BYTES: usize = 16 * 1024 * 1024;

/// How long a request waits for budget by default.
pub const DEFAULT_BUDGET_WAIT: Duration = Duration::from_secs(1);

#[derive(Clone, Debug)]
pub struct Budget {
    bytes: Arc<Semaphore>,
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

/// Bytes held from the budget; given back on drop.
#[derive(Debug)]
pub struct Charge {
    permit: Option<OwnedSemaphorePermit>,
    released: Arc<Notify>,
}

impl Drop for Charge {
    fn drop(&mut self) {
        if self.permit.take().is_some() {
            self.released.notify_waiters();
        }
    }
}

impl Charge {
    fn merge(&mut self, mut other: Charge) {
        match (&mut self.permit, other.permit.take()) {
            (Some(mine), Some(theirs)) => mine.merge(theirs),
            (mine @ None, theirs) => *mine = theirs,
            (Some(_), None) => {}
        }
    }
}

impl Budget {
    pub fn new(total_bytes: usize, wait: Duration) -> Budget {
        let total = total_bytes.clamp(1, u32::MAX as usize);
        Budget {
            bytes: Arc::new(Semaphore::new(total)),
            large: Arc::new(Semaphore::new(1)),
            released: Arc::new(Notify::new()),
            total,
            wait,
        }
    }

    pub fn total(&self) -> usize {
        self.total
    }

    /// An empty charge to add to.
    pub fn none(&self) -> Charge {
        Charge {
            permit: None,
            released: self.released.clone(),
        }
    }

    /// Charges `bytes` (at most the whole budget), waiting up to the wait
    /// time; `None` when the budget stays spent.
    pub async fn charge(&self, bytes: usize) -> Option<Charge> {
        let n = bytes.min(self.total) as u32;
        if n == 0 {
            return Some(self.none());
        }
        let deadline = tokio::time::Instant::now() + self.wait;
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            released.as_mut().enable();
            if let Ok(permit) = self.bytes.clone().try_acquire_many_owned(n) {
                return Some(Charge {
                    permit: Some(permit),
                    released: self.released.clone(),
                });
            }
            tokio::select! {
                _ = released => {}
                _ = tokio::time::sleep_until(deadline) => return None,
            }
        }
    }

    /// Adds `bytes` to `charge`; false when the budget stays spent.
    pub async fn add(&self, charge: &mut Charge, bytes: usize) -> bool {
        match self.charge(bytes).await {
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

    /// Bytes not charged now.
    pub fn available(&self) -> usize {
        self.bytes.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_small_charge_passes_beside_a_waiting_big_one() {
        let budget = Budget::new(100, Duration::from_millis(300));
        let held = budget.charge(80).await.unwrap();
        let b = budget.clone();
        let big = tokio::spawn(async move { b.charge(50).await.is_some() });
        tokio::task::yield_now().await;
        assert!(budget.charge(10).await.is_some(), "small one not queued");
        assert!(!big.await.unwrap(), "big one refused after the wait");
        drop(held);
        assert_eq!(budget.available(), 100);
        let mut c = budget.charge(60).await.unwrap();
        assert!(budget.add(&mut c, 40).await);
        assert_eq!(budget.available(), 0);
        drop(c);
        assert_eq!(budget.available(), 100);
    }

    #[tokio::test]
    async fn a_waiting_charge_gets_released_bytes() {
        let budget = Budget::new(100, Duration::from_secs(30));
        let held = budget.charge(100).await.unwrap();
        let b = budget.clone();
        let waiting = tokio::spawn(async move { b.charge(100).await.is_some() });
        tokio::task::yield_now().await;
        drop(held);
        assert!(waiting.await.unwrap());
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
