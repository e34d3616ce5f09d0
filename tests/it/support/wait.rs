//! The one bounded poll loop. The bound only stops a broken test: nothing
//! asserts elapsed time.

use std::time::Duration;

/// How long [`wait_until`] polls before giving up.
pub const WAIT: Duration = Duration::from_secs(10);
/// How often the loop polls.
pub const POLL: Duration = Duration::from_millis(25);

/// Calls `check` every [`POLL`] until it returns `Some`, for at most `limit`
/// (and once more at the end).
pub async fn poll<T>(limit: Duration, mut check: impl AsyncFnMut() -> Option<T>) -> Option<T> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Polls `check` until it returns `Some`, for at most [`WAIT`]; panics
/// naming `what` otherwise.
pub async fn wait_until<T>(what: &str, check: impl AsyncFnMut() -> Option<T>) -> T {
    wait_until_within(WAIT, what, check).await
}

/// [`wait_until`] with another bound, for what takes longer than [`WAIT`]
/// (a server process starting, a watch backoff).
pub async fn wait_until_within<T>(
    limit: Duration,
    what: &str,
    check: impl AsyncFnMut() -> Option<T>,
) -> T {
    poll(limit, check)
        .await
        .unwrap_or_else(|| panic!("gave up waiting for: {what}"))
}

/// Whether `check` becomes true within `limit` (the caller asserts it, or
/// asserts that something never happens).
pub async fn becomes_true(limit: Duration, mut check: impl AsyncFnMut() -> bool) -> bool {
    poll(limit, async || check().await.then_some(()))
        .await
        .is_some()
}
