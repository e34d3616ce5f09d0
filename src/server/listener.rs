//! The accept loops (HTTPS, and plain HTTP for metrics and probes): every
//! accepted connection is served by [`super::conn::serve`] under
//! [`Limits`]. Accepting never waits for a free slot, so held connections
//! cannot starve new clients: when a set is full, the oldest handshake or
//! the longest-idle connection makes room.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use super::conn::{Shared, serve};
use crate::tls::TlsReloader;

/// Connection limits and timeouts (the README's "Limits" lists the defaults).
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

impl Limits {
    /// The limits of the metrics/probe listener: the same deadlines, its
    /// own small cap.
    pub fn for_metrics(&self, max_connections: usize) -> Limits {
        Limits {
            max_connections,
            max_handshakes: 1,
            ..*self
        }
    }
}

/// Permits of the live-connection counter (far above any cap).
pub(crate) const LIVE_MAX: u32 = 1 << 20;

pub(crate) struct Listener {
    pub listener: TcpListener,
    /// `None`: plain HTTP.
    pub tls: Option<Arc<TlsReloader>>,
    pub shared: Arc<Shared>,
    /// One permit per open connection, to wait for them to close.
    pub live: Arc<Semaphore>,
    pub name: &'static str,
}

impl Listener {
    /// Accepts until `stop_accept` turns true; each connection closes
    /// gracefully once `close_connections` turns true.
    pub async fn run(
        self,
        mut stop_accept: watch::Receiver<bool>,
        close_connections: watch::Receiver<bool>,
    ) {
        loop {
            let (stream, peer) = tokio::select! {
                _ = until_true(&mut stop_accept) => break,
                r = self.listener.accept() => match r {
                    Ok(s) => s,
                    Err(e) => {
                        // e.g. EMFILE: back off instead of spinning.
                        tracing::warn!(error = %e, listener = self.name, "accept failed");
                        if let Some(m) = &self.shared.metrics {
                            m.connection_error("accept");
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let Ok(live) = self.live.clone().try_acquire_owned() else {
                continue;
            };
            let config = match &self.tls {
                None => None,
                Some(tls) => match tls.current() {
                    Some(c) => Some(c),
                    None => {
                        if let Some(m) = &self.shared.metrics {
                            m.connection_error("no_certificate");
                        }
                        tracing::warn!(%peer, "no TLS certificate loaded; closing connection");
                        continue;
                    }
                },
            };
            tokio::spawn(serve(
                self.shared.clone(),
                stream,
                config,
                close_connections.clone(),
                live,
            ));
        }
        tracing::info!(listener = self.name, "stopped accepting connections");
    }
}

/// Completes once the watched flag is true.
pub(crate) async fn until_true(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}
