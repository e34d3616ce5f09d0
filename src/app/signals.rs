//! The `serve` process's signals (`cmd::serve` runs the process). The first
//! SIGTERM/SIGINT starts the graceful shutdown (see [`super::App::run`]);
//! a second one during it exits at once with code 130.

use std::future::Future;

use futures::FutureExt as _;

/// Exit code after a second signal (128 + SIGINT, as shells report Ctrl-C).
const SECOND_SIGNAL_EXIT: i32 = 130;

/// SIGTERM and SIGINT, installed at creation.
struct Signals {
    #[cfg(unix)]
    handlers: Option<(tokio::signal::unix::Signal, tokio::signal::unix::Signal)>,
}

impl Signals {
    fn install() -> Signals {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let term = signal(SignalKind::terminate()).ok();
            Signals {
                handlers: term.zip(signal(SignalKind::interrupt()).ok()),
            }
        }
        #[cfg(not(unix))]
        Signals {}
    }

    /// The next SIGTERM or SIGINT.
    async fn recv(&mut self) {
        #[cfg(unix)]
        if let Some((term, int)) = &mut self.handlers {
            tokio::select! {
                _ = term.recv() => tracing::info!("received SIGTERM"),
                _ = int.recv() => tracing::info!("received SIGINT"),
            }
            return;
        }
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Installs the SIGTERM and SIGINT handlers now (call inside the runtime,
/// before announcing readiness) and returns a future that completes on
/// either signal; after it, a second one exits the process at once (code
/// 130) instead of waiting for the drain.
pub fn shutdown_signal_then_exit() -> impl Future<Output = ()> + Send + 'static {
    let mut signals = Signals::install();
    let (first_tx, first_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        signals.recv().await;
        let _ = first_tx.send(());
        signals.recv().await;
        tracing::warn!("second signal during shutdown: exiting now");
        crate::telemetry::flush_logs();
        std::process::exit(SECOND_SIGNAL_EXIT);
    });
    first_rx.map(|_| ())
}
