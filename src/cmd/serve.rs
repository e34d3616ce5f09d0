//! `knative-ha-webhook serve`: logging, the runtime, the signals, the server.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;

use crate::app::{App, PolicySource, shutdown_signal_then_exit};
use crate::config::ServeConfig;

/// Serves until SIGTERM/SIGINT (a second one exits at once).
pub fn serve(config: ServeConfig) -> anyhow::Result<ExitCode> {
    crate::telemetry::init_logging(config.log_format);
    // Queued log lines reach stderr before the process ends.
    let _flush_logs = crate::telemetry::FlushOnDrop;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(async move {
        // Handlers first: a signal during start-up must not kill the process.
        let signal = shutdown_signal_then_exit();
        let mut client = None;
        if let Some(settings) = &config.kube {
            let why = if matches!(config.app.policy, PolicySource::Cluster { .. }) {
                "policies are read from the cluster (no --policy-file)"
            } else {
                "--reconcile writes to the cluster"
            };
            let (connected, _) = crate::kubeclient::client(settings)
                .await
                .with_context(|| format!("finding the Kubernetes cluster: {why}"))?;
            client = Some(connected);
        }
        let app = App::bind(config.app, client).await?;
        app.run(signal).await?;
        tracing::info!("stopped");
        Ok::<_, anyhow::Error>(())
    });
    // Do not wait for a blocking file read that is still in progress.
    runtime.shutdown_timeout(Duration::from_millis(500));
    result?;
    Ok(ExitCode::SUCCESS)
}
