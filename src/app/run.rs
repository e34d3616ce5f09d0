//! [`App::run`]: start everything, wait for the shutdown signal (or a
//! failed cluster source), then shut down in named steps.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinSet;

use super::{App, AppError, ClusterParts, Config, Result};
use crate::admission::ReviewOptions;
use crate::reconcile::RunningReconciler;
use crate::server::{AppState, Serving};
use crate::sources::cluster::{self, ClusterSourceConfig};
use crate::sources::file::FileSource;
use crate::store::PolicyStore;
use crate::tls::{TlsReloader, TlsSource};

/// Everything [`App::run`] started.
struct Running {
    config: Config,
    background: JoinSet<()>,
    /// The cluster source's end (it only ends on failure).
    cluster_ended: mpsc::Receiver<AppError>,
    reconciler: Option<RunningReconciler>,
    serving: Serving,
}

impl App {
    /// Serves until `shutdown` completes, then: `/readyz` fails at once,
    /// requests keep being served for `shutdown_delay`, the listener closes,
    /// open connections are closed gracefully and in-flight requests get up
    /// to `drain_timeout` to finish. A failed cluster source shuts down the
    /// same way, without the delay, and is the error returned.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<()> {
        let mut running = self.start();
        let failure = running.wait(shutdown).await;
        running.serving.fail_readiness();
        running.stop_reconciler().await;
        if failure.is_none() {
            tokio::time::sleep(running.config.shutdown_delay).await;
        }
        running.serving.close_listener().await;
        running.serving.drain(running.config.drain_timeout).await;
        running.background.abort_all();
        running.serving.stop_probes().await;
        failure.map_or(Ok(()), Err)
    }

    /// Starts the background tasks, the reconciler and both listeners.
    fn start(self) -> Running {
        let App {
            config,
            listeners,
            store,
            metrics,
            registry,
            tls,
            file_source,
            cluster,
            reconciler,
            findings,
        } = self;
        let cluster = cluster.map(|parts| (parts, findings));
        let (background, cluster_ended) =
            spawn_background(&config, &tls, file_source, cluster, &store);
        let reconciler = reconciler.map(crate::reconcile::Reconciler::spawn);
        let bound = listeners.local_addr();
        let metrics_addr = listeners.metrics_addr();
        let state = AppState {
            store,
            metrics,
            options: ReviewOptions {
                on_error: config.on_error,
                undo_unclaimed: config.undo_unclaimed,
            },
        };
        let serving = listeners.serve(config.server, tls, state, registry);
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
            serving,
        }
    }
}

/// The certificate and policy file watchers and the cluster source; the
/// receiver gets the cluster source's end.
fn spawn_background(
    config: &Config,
    tls: &Arc<TlsReloader>,
    file_source: Option<FileSource>,
    cluster: Option<(ClusterParts, crate::findings::Board)>,
    store: &PolicyStore,
) -> (JoinSet<()>, mpsc::Receiver<AppError>) {
    let mut background = JoinSet::new();
    if let TlsSource::Files { .. } = config.tls {
        background.spawn(tls.clone().watch(config.tls_poll_interval));
    }
    if let Some(src) = file_source {
        background.spawn(src.watch(config.policy_poll_interval));
    }
    let (cluster_tx, cluster_ended) = mpsc::channel(1);
    if let Some(((client, cm, namespace), findings)) = cluster {
        let cfg = ClusterSourceConfig {
            namespace,
            governed: config.governed.clone(),
            instance: config.pod_name.clone(),
            findings,
        };
        let store = store.clone();
        background.spawn(async move {
            let error = match cluster::run(client, cfg, store, cm).await {
                Ok(()) => AppError::ClusterSourceStopped,
                Err(e) => AppError::ClusterSource(e),
            };
            let _ = cluster_tx.send(error).await;
        });
    }
    (background, cluster_ended)
}

impl Running {
    /// Until `shutdown` completes or the cluster source fails (its error).
    async fn wait(&mut self, shutdown: impl Future<Output = ()>) -> Option<AppError> {
        tokio::select! {
            _ = shutdown => None,
            Some(error) = self.cluster_ended.recv() => {
                let cause = std::error::Error::source(&error)
                    .map_or_else(|| "stopped".to_string(), crate::errors::chain);
                tracing::error!(error = %cause, "cluster policy source failed; shutting down");
                Some(error)
            }
        }
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
}
