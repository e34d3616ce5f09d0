//! The two listeners at work: [`Listeners::serve`] starts them, and
//! [`Serving`]'s steps stop them (readiness fails, the HTTPS listener
//! closes, its connections drain, the probe listener ends). The
//! application ([`crate::app`]) decides when each step runs.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;

use super::{
    AppState, Budget, DEFAULT_BUDGET_BYTES, DEFAULT_BUDGET_WAIT, Limits, METRICS_MAX_CONNECTIONS,
    Result, ServerError, conn, listener, probes, slots,
};
use crate::telemetry::Metrics;
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
    /// The production settings: [`Limits::default`],
    /// [`METRICS_MAX_CONNECTIONS`], [`DEFAULT_BUDGET_BYTES`] and
    /// [`DEFAULT_BUDGET_WAIT`].
    fn default() -> Settings {
        Settings {
            limits: Limits::default(),
            metrics_max_connections: METRICS_MAX_CONNECTIONS,
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
    pub async fn bind(listen: SocketAddr, metrics_listen: SocketAddr) -> Result<Listeners> {
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
        let shutting_down = Arc::new(AtomicBool::new(false));
        let readiness = probes::Readiness {
            store: state.store.clone(),
            tls: Some(tls.clone()),
            shutting_down: shutting_down.clone(),
            metrics: state.metrics.clone(),
        };
        let probes = serve_probes(&settings, self.metrics, readiness, registry);
        let (https, draining, live) = serve_https(&settings, self.https, tls, state);
        Serving {
            shutting_down,
            draining,
            live,
            https,
            probes,
        }
    }
}

/// A listener task and the switches that stop it.
struct Task {
    /// Stops accepting (the listener closes).
    stop_accept: watch::Sender<bool>,
    /// Closes open connections gracefully.
    close: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// Both listeners, serving.
pub struct Serving {
    shutting_down: Arc<AtomicBool>,
    /// Tells HTTPS connections to close after their current request.
    draining: watch::Sender<bool>,
    /// One permit per live HTTPS connection: all back means drained.
    live: Arc<Semaphore>,
    https: Task,
    probes: Task,
}

impl Serving {
    /// `/readyz` fails; HTTPS connections close after their current request.
    pub fn fail_readiness(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
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
        let all = self.live.acquire_many(listener::LIVE_MAX);
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

/// The plain HTTP listener of /metrics, /healthz and /readyz.
fn serve_probes(
    settings: &Settings,
    metrics_listener: TcpListener,
    readiness: probes::Readiness,
    registry: Arc<Registry>,
) -> Task {
    let (_never_draining, not_draining) = watch::channel(false);
    let limits = settings
        .limits
        .for_metrics(settings.metrics_max_connections);
    spawn(listener::Listener {
        listener: metrics_listener,
        tls: None,
        shared: conn_shared(
            probes::router(readiness, registry),
            not_draining,
            None,
            limits,
        ),
        live: Arc::new(Semaphore::new(listener::LIVE_MAX as usize)),
        name: "metrics",
    })
}

/// The HTTPS listener of POST /mutate; also the switch that drains its
/// connections and the semaphore that counts them.
fn serve_https(
    settings: &Settings,
    listener: TcpListener,
    tls: Arc<TlsReloader>,
    state: AppState,
) -> (Task, watch::Sender<bool>, Arc<Semaphore>) {
    let budget = Budget::new(settings.body_budget_bytes, settings.body_budget_wait);
    let live = Arc::new(Semaphore::new(listener::LIVE_MAX as usize));
    let (draining, draining_rx) = watch::channel(false);
    let metrics = state.metrics.clone();
    let https = spawn(listener::Listener {
        listener,
        tls: Some(tls),
        shared: conn_shared(
            super::router_with_budget(state, budget),
            draining_rx,
            Some(metrics),
            settings.limits,
        ),
        live: live.clone(),
        name: "https",
    });
    (https, draining, live)
}

/// Runs a listener in a task.
fn spawn(listener: listener::Listener) -> Task {
    let (stop_accept, stop_accept_rx) = watch::channel(false);
    let (close, close_rx) = watch::channel(false);
    Task {
        stop_accept,
        close,
        task: tokio::spawn(listener.run(stop_accept_rx, close_rx)),
    }
}

/// The shared state of one listener's connections.
fn conn_shared(
    router: axum::Router,
    draining: watch::Receiver<bool>,
    metrics: Option<Metrics>,
    limits: Limits,
) -> Arc<conn::Shared> {
    Arc::new(conn::Shared {
        router,
        draining,
        metrics,
        limits,
        handshakes: slots::Slots::new(limits.max_handshakes, slots::Evict::Oldest),
        established: slots::Slots::new(limits.max_connections, slots::Evict::LongestIdle),
    })
}
