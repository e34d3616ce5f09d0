//! [`App::run`]: start everything, wait for the shutdown signal (or a
//! failed cluster source), then shut down in named steps.

use std::future::Future;
use std::time::Duration;

use tokio::task::JoinSet;

use super::{App, Result};

impl App {
    /// Serves until `shutdown` completes, then: `/readyz` fails at once,
    /// requests keep being served for `shutdown_delay`, the listener closes,
    /// open connections are closed gracefully and in-flight requests get up
    /// to `drain_timeout` to finish. A failed cluster source shuts down the
    /// same way, without the delay, and is the error returned.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<()> {
        let App {
            config,
            listeners,
            state,
            registry,
            tls,
            background,
            reconciler,
        } = self;
        let mut tasks = JoinSet::new();
        for task in background {
            tasks.spawn(task);
        }
        let reconciler = reconciler.map(crate::reconcile::Reconciler::spawn);
        let (bound, metrics_addr) = (listeners.local_addr(), listeners.metrics_addr());
        let mut serving = listeners.serve(config.server, tls, state, registry);
        tracing::info!(
            listen = %bound.map(|a| a.to_string()).unwrap_or_default(),
            metrics_listen = %metrics_addr.map(|a| a.to_string()).unwrap_or_default(),
            "serving POST /mutate over HTTPS"
        );
        let failure = tokio::select! {
            _ = shutdown => None,
            Some(Ok(Some(error))) = tasks.join_next() => {
                let cause = std::error::Error::source(&error)
                    .map_or_else(|| "stopped".to_string(), crate::errors::chain);
                tracing::error!(error = %cause, "cluster policy source failed; shutting down");
                Some(error)
            }
        };
        serving.fail_readiness();
        // The reconciler gives its Lease up.
        if let Some(r) = reconciler {
            r.stop(Duration::from_secs(5)).await;
        }
        tracing::info!(
            delay_ms = config.shutdown_delay.as_millis() as u64,
            "shutting down: readiness now fails; still serving during the shutdown delay"
        );
        if failure.is_none() {
            tokio::time::sleep(config.shutdown_delay).await;
        }
        serving.close_listener().await;
        serving.drain(config.drain_timeout).await;
        tasks.abort_all();
        serving.stop_probes().await;
        failure.map_or(Ok(()), Err)
    }
}
