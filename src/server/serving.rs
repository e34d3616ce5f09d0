//! The two listeners at work: [`Listeners::serve`] starts them, and
//! [`Serving`]'s steps stop them (readiness fails, the HTTPS listener
//! closes, its connections drain, the probe listener ends). The
//! application ([`crate::app`]) decides when each step runs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;

use super::conn::Shared;
use super::listener::{self, LIVE_MAX, Task};
use super::{
    AppState, Budget, DEFAULT_BUDGET_BYTES, DEFAULT_BUDGET_WAIT, Limits, ServerError, probes,
};
use crate::tls::TlsReloader;

/// What the two listeners run with.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Limits of the HTTPS listener.
    pub limits: Limits,
    /// Connection cap of the metrics/probe listener (same deadlines as `limits`).
    pub metrics_max_connections: usize,
    /// Bytes of request bodies in flight, at most (see [`Budget`]).
    pub body_budget_bytes: usize,
    /// How long a request waits for body budget before a 503.
    pub body_budget_wait: Duration,
}

impl Default for Settings {
    /// The production settings (the defaults of each part).
    fn default() -> Settings {
        Settings {
            limits: Limits::default(),
            metrics_max_connections: 32,
            body_budget_bytes: DEFAULT_BUDGET_BYTES,
            body_budget_wait: DEFAULT_BUDGET_WAIT,
        }
    }
}

/// The HTTPS listener of `POST /mutate` and `/validate`, and the plain
/// HTTP listener of `/metrics`, `/healthz` and `/readyz`, bound.
pub struct Listeners {
    https: TcpListener,
    metrics: TcpListener,
}

impl Listeners {
    /// Binds both addresses.
    pub async fn bind(
        listen: SocketAddr,
        metrics_listen: SocketAddr,
    ) -> Result<Listeners, ServerError> {
        let bind = |what, addr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|error| ServerError::Bind { what, addr, error })
        };
        Ok(Listeners {
            https: bind("HTTPS listener", listen).await?,
            metrics: bind("metrics listener", metrics_listen).await?,
        })
    }

    /// The bound HTTPS address.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.https.local_addr().ok()
    }

    /// The bound metrics/probes address.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics.local_addr().ok()
    }

    /// Starts both listeners: HTTPS with `tls` and the routes over `state`,
    /// the probes reporting on `state.store` and `tls`.
    pub fn serve(
        self,
        settings: Settings,
        tls: Arc<TlsReloader>,
        state: AppState,
        registry: Arc<Registry>,
    ) -> Serving {
        let (draining, draining_rx) = watch::channel(false);
        let readiness = probes::Readiness {
            store: state.store.clone(),
            tls: tls.clone(),
            shutting_down: draining_rx.clone(),
            metrics: state.metrics.clone(),
        };
        // The probe listener: the same deadlines, its own small cap, its
        // connections never drained (the sender is dropped at once).
        let limits = Limits {
            max_connections: settings.metrics_max_connections,
            max_handshakes: 1,
            ..settings.limits
        };
        let router = probes::router(readiness, registry);
        let shared = Shared::new(router, watch::channel(false).1, None, limits);
        let probes = listener::spawn(self.metrics, None, shared, "metrics");
        let budget = Budget::new(settings.body_budget_bytes, settings.body_budget_wait);
        let metrics = Some(state.metrics.clone());
        let router = super::router_with_budget(state, budget);
        let shared = Shared::new(router, draining_rx, metrics, settings.limits);
        let https = listener::spawn(self.https, Some(tls), shared, "https");
        Serving {
            draining,
            https,
            probes,
        }
    }
}

/// Both listeners, serving.
pub struct Serving {
    /// True from the start of shutdown: `/readyz` fails and HTTPS
    /// connections close after their current request.
    draining: watch::Sender<bool>,
    https: Task,
    probes: Task,
}

impl Serving {
    /// `/readyz` fails; HTTPS connections close after their current request.
    pub fn fail_readiness(&self) {
        let _ = self.draining.send(true);
    }

    /// Closes the HTTPS listener, then asks open connections to close.
    pub async fn close_listener(&mut self) {
        let _ = self.https.stop_accept.send(true);
        let _ = (&mut self.https.task).await;
        let _ = self.https.close.send(true);
    }

    /// Waits up to `timeout` for every HTTPS connection to end.
    pub async fn drain(&self, timeout: Duration) {
        let all = self.https.live.acquire_many(LIVE_MAX);
        match tokio::time::timeout(timeout, all).await {
            Ok(_) => tracing::info!("all connections closed"),
            Err(_) => tracing::warn!(
                timeout_ms = timeout.as_millis() as u64,
                "drain timeout: closing remaining connections"
            ),
        }
    }

    /// Ends the metrics/probe listener.
    pub async fn stop_probes(self) {
        let _ = self.probes.stop_accept.send(true);
        let _ = self.probes.close.send(true);
        let _ = self.probes.task.await;
    }
}
