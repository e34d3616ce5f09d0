//! [`Server::run`]: start everything, wait for the shutdown signal (or a
//! failed cluster source), then shut down in named steps.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};

use super::{
    AppState, Budget, Config, Result, Server, ServerError, conn_shared, listener, probes,
    router_with_budget,
};
use crate::admission::ReviewOptions;
use crate::reconcile::RunningReconciler;
use crate::sources::cluster::{self, ClusterSourceConfig};
use crate::sources::file::FileSource;
use crate::store::PolicyStore;
use crate::telemetry::Metrics;
use crate::tls::{TlsReloader, TlsSource};

/// A listener task and the switches that stop it.
struct Serving {
    /// Stops accepting (the listener closes).
    stop_accept: watch::Sender<bool>,
    /// Closes open connections gracefully.
    close: watch::Sender<bool>,
    task: JoinHandle<()>,
}

/// Everything [`Server::run`] started.
struct Running {
    config: Config,
    background: JoinSet<()>,
    /// The cluster source's end (it only ends on failure).
    cluster_ended: mpsc::Receiver<ServerError>,
    reconciler: Option<RunningReconciler>,
    shutting_down: Arc<AtomicBool>,
    /// Tells HTTPS connections to close after their current request.
    draining: watch::Sender<bool>,
    /// One permit per live HTTPS connection: all back means drained.
    live: Arc<Semaphore>,
    https: Serving,
    probes: Serving,
}

impl Server {
    /// Serves until `shutdown` completes, then: `/readyz` fails at once,
    /// requests keep being served for `shutdown_delay`, the listener closes,
    /// open connections are closed gracefully and in-flight requests get up
    /// to `drain_timeout` to finish. A failed cluster source shuts down the
    /// same way, without the delay, and is the error returned.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<()> {
        let mut running = self.start();
        let failure = running.wait(shutdown).await;
        running.fail_readiness();
        running.stop_reconciler().await;
        if failure.is_none() {
            running.hold_for_shutdown_delay().await;
        }
        running.close_listener().await;
        running.drain().await;
        running.stop_background().await;
        failure.map_or(Ok(()), Err)
    }

    /// Starts the background tasks, the reconciler and both listeners.
    fn start(self) -> Running {
        let Server {
            config,
            listener,
            metrics_listener,
            store,
            metrics,
            registry,
            tls,
            shutting_down,
            file_source,
            cluster,
            reconciler,
        } = self;
        let (background, cluster_ended) =
            spawn_background(&config, &tls, file_source, cluster, &store);
        let reconciler = reconciler.map(crate::reconcile::Reconciler::spawn);
        let readiness = probes::Readiness {
            store: store.clone(),
            tls: Some(tls.clone()),
            shutting_down: shutting_down.clone(),
            metrics: metrics.clone(),
        };
        let metrics_addr = metrics_listener.local_addr().ok();
        let probes = serve_probes(&config, metrics_listener, readiness, registry);
        let bound = listener.local_addr().ok();
        let state = AppState {
            store,
            metrics: metrics.clone(),
            options: ReviewOptions {
                on_error: config.on_error,
            },
        };
        let (https, draining, live) = serve_https(&config, listener, tls, state, metrics);
        tracing::info!(
            listen = %bound.map(|a| a.to_string()).unwrap_or_default(),
            metrics_listen = %metrics_addr.map(|a| a.to_string()).unwrap_or_default(),
            "serving POST /mutate over HTTPS"
        );
        Running {
            config,
            background,
            cluster_ended,
            reconciler,
            shutting_down,
            draining,
            live,
            https,
            probes,
        }
    }
}

/// The policy source's cluster connection: client, metrics, own namespace.
type ClusterParts = (kube::Client, cluster::ClusterMetrics, String);

/// The certificate and policy file watchers and the cluster source; the
/// receiver gets the cluster source's end.
fn spawn_background(
    config: &Config,
    tls: &Arc<TlsReloader>,
    file_source: Option<FileSource>,
    cluster: Option<ClusterParts>,
    store: &PolicyStore,
) -> (JoinSet<()>, mpsc::Receiver<ServerError>) {
    let mut background = JoinSet::new();
    if let TlsSource::Files { .. } = config.tls {
        background.spawn(tls.clone().watch(config.tls_poll_interval));
    }
    if let Some(src) = file_source {
        background.spawn(src.watch(config.policy_poll_interval));
    }
    let (cluster_tx, cluster_ended) = mpsc::channel(1);
    if let Some((client, cm, namespace)) = cluster {
        let cfg = ClusterSourceConfig {
            namespace,
            governed: config.governed.clone(),
            instance: config.pod_name.clone(),
        };
        let store = store.clone();
        background.spawn(async move {
            let error = match cluster::run(client, cfg, store, cm).await {
                Ok(()) => ServerError::ClusterSourceStopped,
                Err(e) => ServerError::ClusterSource(e),
            };
            let _ = cluster_tx.send(error).await;
        });
    }
    (background, cluster_ended)
}

/// The plain HTTP listener of /metrics, /healthz and /readyz.
fn serve_probes(
    config: &Config,
    metrics_listener: TcpListener,
    readiness: probes::Readiness,
    registry: Arc<Registry>,
) -> Serving {
    let (_never_draining, not_draining) = watch::channel(false);
    let limits = config.limits.for_metrics(config.metrics_max_connections);
    serve(listener::Listener {
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
    config: &Config,
    listener: TcpListener,
    tls: Arc<TlsReloader>,
    state: AppState,
    metrics: Metrics,
) -> (Serving, watch::Sender<bool>, Arc<Semaphore>) {
    let budget = Budget::new(config.body_budget_bytes, config.body_budget_wait);
    let live = Arc::new(Semaphore::new(listener::LIVE_MAX as usize));
    let (draining, draining_rx) = watch::channel(false);
    let https = serve(listener::Listener {
        listener,
        tls: Some(tls),
        shared: conn_shared(
            router_with_budget(state, budget),
            draining_rx,
            Some(metrics),
            config.limits,
        ),
        live: live.clone(),
        name: "https",
    });
    (https, draining, live)
}

/// Runs a listener in a task.
fn serve(listener: listener::Listener) -> Serving {
    let (stop_accept, stop_accept_rx) = watch::channel(false);
    let (close, close_rx) = watch::channel(false);
    Serving {
        stop_accept,
        close,
        task: tokio::spawn(listener.run(stop_accept_rx, close_rx)),
    }
}

impl Running {
    /// Until `shutdown` completes or the cluster source fails (its error).
    async fn wait(&mut self, shutdown: impl Future<Output = ()>) -> Option<ServerError> {
        tokio::select! {
            _ = shutdown => None,
            Some(error) = self.cluster_ended.recv() => {
                let cause = std::error::Error::source(&error)
                    .map_or_else(|| "stopped".to_string(), ToString::to_string);
                tracing::error!(error = %cause, "cluster policy source failed; shutting down");
                Some(error)
            }
        }
    }

    /// `/readyz` fails; HTTPS connections close after their current request.
    fn fail_readiness(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
        let _ = self.draining.send(true);
    }

    /// Stops the reconciler, which gives its Lease up.
    async fn stop_reconciler(&mut self) {
        if let Some(r) = self.reconciler.take() {
            r.stop(Duration::from_secs(5)).await;
        }
        tracing::info!(
            delay_ms = self.config.shutdown_delay.as_millis() as u64,
            "shutting down: readiness now fails; still serving during the shutdown delay"
        );
    }

    /// Keeps serving for `shutdown_delay` (endpoints catch up meanwhile).
    async fn hold_for_shutdown_delay(&self) {
        tokio::time::sleep(self.config.shutdown_delay).await;
    }

    /// Closes the HTTPS listener, then asks open connections to close.
    async fn close_listener(&mut self) {
        let _ = self.https.stop_accept.send(true);
        let _ = (&mut self.https.task).await;
        let _ = self.https.close.send(true);
    }

    /// Waits up to `drain_timeout` for every HTTPS connection to end.
    async fn drain(&self) {
        let all = self.live.acquire_many(listener::LIVE_MAX);
        match tokio::time::timeout(self.config.drain_timeout, all).await {
            Ok(_) => tracing::info!("all connections closed"),
            Err(_) => tracing::warn!(
                timeout_ms = self.config.drain_timeout.as_millis() as u64,
                "drain timeout: closing remaining connections"
            ),
        }
    }

    /// Ends the background tasks and the metrics/probe listener.
    async fn stop_background(mut self) {
        self.background.abort_all();
        let _ = self.probes.stop_accept.send(true);
        let _ = self.probes.close.send(true);
        let _ = self.probes.task.await;
    }
}
