//! One kube-runtime watcher per source (per namespace for HPAs and the
//! other [`super::namespace_watches`]), its events handed to a handler that
//! makes the [`Msg`]s for the state. Keeps `source_up` and `watch_errors`, logs
//! outages and reconnects, and treats a 404 on the policy resource as
//! "CRD not installed" (not fatal; retried).
//!
//! Backoff and logging are done here rather than with kube-runtime's
//! `default_backoff()`: the watcher emits `Event::Init` *before* each
//! relist, so a failed relist looks like "one success, one error" to a
//! generic backoff (which then resets to 0.8 s) and to the log (which
//! would say "reconnected"). Here only an answer of the API server counts:
//! an object or the end of a list ([`Outage::success`]); `Init` does not.

use std::fmt::Debug;
use std::time::Duration;

use futures::StreamExt;
use kube::api::ListParams;
use kube::runtime::watcher;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc::UnboundedSender;

use super::{ClusterError, ClusterMetrics, Msg, Source, WatchEvent};

/// The first retry after an error.
pub const BACKOFF_INITIAL: Duration = Duration::from_millis(800);
/// Retries are at most this far apart.
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// While the policy CRD is not installed: re-checked at most this far apart.
const CRD_RECHECK_MAX: Duration = Duration::from_secs(5);
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Exponential backoff: 0.8 s doubling up to 30 s, reset by a success.
#[derive(Debug)]
pub struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    pub fn new(max: Duration) -> Backoff {
        Backoff {
            next: BACKOFF_INITIAL,
            max,
        }
    }

    /// The delay before the next attempt (and doubles the one after).
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }

    pub fn reset(&mut self) {
        self.next = BACKOFF_INITIAL;
    }
}

/// True when the error says the resource itself does not exist.
fn is_not_found(err: &watcher::Error) -> bool {
    match err {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code == 404,
        _ => false,
    }
}

/// True for `410 Gone` in a watch: the resourceVersion expired, the
/// watcher relists at once. Routine, not an outage.
fn is_gone(err: &watcher::Error) -> bool {
    matches!(err, watcher::Error::WatchError(s) if s.code == 410)
}

/// True when the failed step was a (re)start of the watch rather than a
/// list: a later successful watch start says nothing until an object
/// changes, so a cheap list checks whether the API server answers again.
fn needs_probe(err: &watcher::Error) -> bool {
    matches!(
        err,
        watcher::Error::WatchStartFailed(_) | watcher::Error::WatchFailed(_)
    )
}

/// The up/down bookkeeping of one watch: one warning per outage,
/// "reconnected" only after a real answer.
struct Outage<'a> {
    label: &'static str,
    scope: &'a str,
    metrics: ClusterMetrics,
    /// None until the first answer or error.
    up: Option<bool>,
    backoff: Backoff,
}

impl Outage<'_> {
    /// Called for every answer: cheap unless the watch was down.
    fn success(&mut self) {
        if self.up == Some(true) {
            return;
        }
        if self.up == Some(false) {
            tracing::info!(source = self.label, scope = self.scope, "watch reconnected");
        }
        self.up = Some(true);
        self.backoff.reset();
        self.metrics.set_up(self.label, true);
    }

    /// Records a failure; returns how long to wait before the next attempt.
    fn failure(&mut self, err: &watcher::Error) -> Duration {
        self.metrics.watch_error(self.label);
        self.metrics.set_up(self.label, false);
        let delay = self.backoff.next_delay();
        if self.up != Some(false) {
            tracing::warn!(
                source = self.label,
                scope = self.scope,
                error = %err,
                "watch failed; the last known policies stay in force; retrying with backoff"
            );
        } else {
            tracing::debug!(source = self.label, scope = self.scope, error = %err,
                retry_in_ms = delay.as_millis() as u64, "watch still failing");
        }
        self.up = Some(false);
        delay
    }
}

/// One watcher: what it watches and where its changes go. `scope` names
/// what is watched in log lines (`cluster` or a namespace); `handle` takes
/// each event and makes the message for the state, or keeps it (None:
/// nothing is sent, the state is not woken; the per-namespace watchers fold
/// their events into their reflector store in their own task this way).
pub(crate) struct Watch<'a, K, H>
where
    K: Resource,
{
    pub source: Source,
    pub scope: &'a str,
    pub api: Api<K>,
    pub config: watcher::Config,
    pub tx: UnboundedSender<Msg>,
    pub metrics: ClusterMetrics,
    pub handle: H,
}

/// What one running watch remembers between events.
struct Progress<'a> {
    outage: Outage<'a>,
    /// The policy CRD answered 404 (until its list completes again).
    crd_missing: bool,
    crd_backoff: Backoff,
}

impl<K, H> Watch<'_, K, H>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    H: FnMut(watcher::Event<K>) -> Option<Msg>,
{
    /// Runs the watcher until the channel closes.
    pub(crate) async fn run(mut self) -> Result<(), ClusterError> {
        let label = self.source.label();
        let mut stream = watcher(self.api.clone(), self.config.clone()).boxed();
        let mut progress = Progress {
            outage: Outage {
                label,
                scope: self.scope,
                metrics: self.metrics.clone(),
                up: None,
                backoff: Backoff::new(BACKOFF_MAX),
            },
            crd_missing: false,
            crd_backoff: Backoff::new(CRD_RECHECK_MAX),
        };
        loop {
            let Some(next) = stream.next().await else {
                return Err(ClusterError::StreamEnded(label));
            };
            match next {
                Ok(event) => {
                    self.on_event(&mut progress, &event);
                    let msg = (self.handle)(event);
                    self.send(msg)?;
                }
                Err(err) => self.on_error(&mut progress, err).await?,
            }
        }
    }

    fn send(&self, msg: Option<Msg>) -> Result<(), ClusterError> {
        let Some(msg) = msg else {
            return Ok(());
        };
        self.tx
            .send(msg)
            .map_err(|_| ClusterError::ChannelClosed("watch"))
    }

    /// A failed step: the CRD not installed, an expired watch, or an
    /// outage (waits out the backoff, then probes when that helps).
    async fn on_error(
        &mut self,
        progress: &mut Progress<'_>,
        err: watcher::Error,
    ) -> Result<(), ClusterError> {
        if self.source == Source::Policies && is_not_found(&err) {
            // The API server answered: the source is reachable, the
            // resource type is simply not there (yet).
            progress.outage.success();
            if !progress.crd_missing {
                tracing::info!("HighAvailabilityPolicy CRD not installed; using ConfigMaps only");
                progress.crd_missing = true;
            }
            self.send(Some(Msg::Watch(self.source, WatchEvent::Missing)))?;
            tokio::time::sleep(progress.crd_backoff.next_delay()).await;
            return Ok(());
        }
        if is_gone(&err) {
            tracing::debug!(
                source = self.source.label(),
                scope = self.scope,
                "watch expired (410 Gone); relisting"
            );
            return Ok(());
        }
        let delay = progress.outage.failure(&err);
        tokio::time::sleep(delay).await;
        if needs_probe(&err) {
            let lp = ListParams::default().limit(1);
            if let Ok(Ok(_)) = tokio::time::timeout(PROBE_TIMEOUT, self.api.list(&lp)).await {
                progress.outage.success();
            }
        }
        Ok(())
    }

    /// The bookkeeping of one watcher event: every event but `Init` is an
    /// answer of the API server.
    fn on_event(&self, progress: &mut Progress<'_>, event: &watcher::Event<K>) {
        match event {
            // Emitted before the list is even requested: not an answer.
            watcher::Event::Init => {}
            watcher::Event::InitDone => {
                progress.outage.success();
                progress.crd_backoff.reset();
                if progress.crd_missing {
                    tracing::info!(
                        "HighAvailabilityPolicy CRD installed; watching HighAvailabilityPolicies"
                    );
                    progress.crd_missing = false;
                }
                tracing::debug!(
                    source = self.source.label(),
                    scope = self.scope,
                    "list complete"
                );
            }
            watcher::Event::InitApply(_) | watcher::Event::Apply(_) | watcher::Event::Delete(_) => {
                progress.outage.success()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_the_cap_and_resets() {
        let mut b = Backoff::new(BACKOFF_MAX);
        let got: Vec<u64> = (0..8).map(|_| b.next_delay().as_millis() as u64).collect();
        assert_eq!(got, [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
        b.reset();
        assert_eq!(b.next_delay(), BACKOFF_INITIAL);
    }
}
