//! The accept loops (HTTPS, and plain HTTP for metrics and probes): every
//! accepted connection is served by [`super::conn::serve`] under
//! [`super::Limits`]. Accepting never waits for a free slot, so held connections
//! cannot starve new clients: when a set is full, the oldest handshake or
//! the longest-idle connection makes room.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;

use super::conn::{Shared, serve};
use super::limits::until_true;
use crate::tls::TlsReloader;

/// Permits of the live-connection counter (far above any cap).
pub(crate) const LIVE_MAX: u32 = 1 << 20;

/// A listener task and the switches that stop it.
pub(crate) struct Task {
    /// Stops accepting (the listener closes).
    pub stop_accept: watch::Sender<bool>,
    /// Closes open connections gracefully.
    pub close: watch::Sender<bool>,
    /// One permit per open connection: all back means drained.
    pub live: Arc<Semaphore>,
    pub task: JoinHandle<()>,
}

/// Runs a listener in a task (`tls`: `None` for plain HTTP): it accepts
/// until `stop_accept` turns true, and each connection closes gracefully
/// once `close` turns true.
pub(crate) fn spawn(
    listener: TcpListener,
    tls: Option<Arc<TlsReloader>>,
    shared: Arc<Shared>,
    name: &'static str,
) -> Task {
    let (stop_accept, mut stop_accept_rx) = watch::channel(false);
    let (close, close_rx) = watch::channel(false);
    let live = Arc::new(Semaphore::new(LIVE_MAX as usize));
    let permits = live.clone();
    let task = tokio::spawn(async move {
        loop {
            let (stream, peer) = tokio::select! {
                _ = until_true(&mut stop_accept_rx) => break,
                r = listener.accept() => match r {
                    Ok(s) => s,
                    Err(e) => {
                        // e.g. EMFILE: back off instead of spinning.
                        tracing::warn!(error = %e, listener = name, "accept failed");
                        shared.error("accept");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let Ok(live) = permits.clone().try_acquire_owned() else {
                continue;
            };
            // `Some(None)`: HTTPS without a certificate loaded.
            let config = tls.as_ref().map(|tls| tls.current());
            if config.as_ref().is_some_and(Option::is_none) {
                shared.error("no_certificate");
                tracing::warn!(%peer, "no TLS certificate loaded; closing connection");
                continue;
            }
            let conn = serve(
                shared.clone(),
                stream,
                config.flatten(),
                close_rx.clone(),
                live,
            );
            tokio::spawn(conn);
        }
        tracing::info!(listener = name, "stopped accepting connections");
    });
    Task {
        stop_accept,
        close,
        live,
        task,
    }
}
