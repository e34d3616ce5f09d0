//! The reconciler's write rate limit.

use std::time::Duration;

use tokio::time::Instant;

/// Spaces writes out to at most `rate` per second.
#[derive(Debug)]
pub struct RateLimiter {
    every: Duration,
    next: Option<Instant>,
}

impl RateLimiter {
    pub fn new(rate: f64) -> RateLimiter {
        RateLimiter {
            every: Duration::from_secs_f64(1.0 / rate.max(1e-3)),
            next: None,
        }
    }

    pub async fn acquire(&mut self) {
        let now = Instant::now();
        let at = self.next.filter(|n| *n > now).unwrap_or(now);
        if at > now {
            tokio::time::sleep_until(at).await;
        }
        self.next = Some(at + self.every);
    }
}
