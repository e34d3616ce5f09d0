//! Connection limits and timeouts, shared by the accept loops
//! ([`super::listener`]) and the per-connection lifecycle ([`super::conn`]).

use std::time::Duration;

use tokio::sync::watch;

/// Connection limits and timeouts (docs/server.md, "Limits", lists the defaults).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Connections past the TLS handshake, at most; when full, the one idle
    /// the longest is closed to make room (when every connection has a
    /// request in progress, the one whose request has lasted the longest).
    pub max_connections: usize,
    /// TLS handshakes in progress, at most; when full, the oldest is dropped.
    pub max_handshakes: usize,
    /// From accept to the first complete request head (TLS handshake and
    /// protocol detection included); for HTTP/1.1 also how long a
    /// keep-alive connection waits for (and reads) each later request head.
    pub header_read_timeout: Duration,
    /// A connection with no request in progress for this long since its
    /// last request is closed gracefully (h2 PINGs do not count).
    pub idle_timeout: Duration,
    /// A connection still open this long after a graceful close began
    /// (GOAWAY sent) is dropped.
    pub goaway_timeout: Duration,
    /// An answer the client has not taken for this long drops the connection.
    pub write_timeout: Duration,
    /// Concurrent h2 streams (requests) per connection.
    pub max_concurrent_streams: u32,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 512,
            max_handshakes: 256,
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            goaway_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(10),
            max_concurrent_streams: 32,
        }
    }
}

/// Completes once the watched flag is true.
pub(crate) async fn until_true(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}
