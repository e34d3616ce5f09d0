//! The accept loops (HTTPS, and plain HTTP for metrics and probes): every
//! accepted connection is served by [`super::conn::serve`] under
//! [`super::Limits`]. Accepting never waits for a free slot, so held connections
//! cannot starve new clients: when a set is full, the oldest handshake or
//! the longest-idle connection makes room.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use super::conn::{Shared, serve};
use super::limits::until_true;
use crate::tls::TlsReloader;

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
