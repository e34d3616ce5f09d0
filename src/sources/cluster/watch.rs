//! One kube-runtime watcher per source ([`Watch`]): it keeps `source_up`
//! and `watch_errors`, logs outages and reconnects, and treats a 404 on the
//! policy resource as "CRD not installed" (not fatal; retried).
//!
//! Backoff and logging are done here rather than with kube-runtime's
//! `default_backoff()`: the watcher emits `Event::Init` *before* each
//! relist, so a failed relist looks like "one success, one error" to a
//! generic backoff (which then resets to 0.8 s) and to the log (which
//! would say "reconnected"). Here only an answer of the API server counts:
//! an object or the end of a list; `Init` does not.

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

/// One watcher: what it watches and where its changes go. `scope` names
/// what is watched in log lines (`cluster` or a namespace); `handle` takes
/// each event and makes the message for the state, or keeps it (None:
/// nothing is sent, the state is not woken; the per-namespace watchers fold
/// their events into their reflector store in their own task this way).
pub(crate) struct Watch<'a, K: Resource, H> {
    pub source: Source,
    pub scope: &'a str,
    pub api: Api<K>,
    pub config: watcher::Config,
    pub tx: UnboundedSender<Msg>,
    pub metrics: ClusterMetrics,
    pub handle: H,
}

/// What one running watch remembers between events: whether it is up
/// (None until the first answer or error: one warning per outage,
/// "reconnected" only after a real answer) and whether the policy CRD
/// answered 404 (until its list completes again).
struct Outage {
    up: Option<bool>,
    backoff: Backoff,
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
        let mut stream = watcher(self.api.clone(), self.config.clone()).boxed();
        let mut outage = Outage {
            up: None,
            backoff: Backoff::new(BACKOFF_MAX),
            crd_missing: false,
            crd_backoff: Backoff::new(CRD_RECHECK_MAX),
        };
        while let Some(next) = stream.next().await {
            match next {
                Ok(event) => {
                    self.on_event(&mut outage, &event);
                    if let Some(msg) = (self.handle)(event) {
                        self.send(msg)?;
                    }
                }
                Err(err) => self.on_error(&mut outage, err).await?,
            }
        }
        Err(ClusterError::StreamEnded(self.source.label()))
    }

    fn send(&self, msg: Msg) -> Result<(), ClusterError> {
        self.tx
            .send(msg)
            .map_err(|_| ClusterError::ChannelClosed("watch"))
    }

    /// Called for every answer: cheap unless the watch was down.
    fn success(&self, outage: &mut Outage) {
        if outage.up == Some(true) {
            return;
        }
        if outage.up == Some(false) {
            tracing::info!(
                source = self.source.label(),
                scope = self.scope,
                "watch reconnected"
            );
        }
        outage.up = Some(true);
        outage.backoff.reset();
        self.metrics.set_up(self.source.label(), true);
    }

    /// A failed step: the CRD not installed, an expired watch, or an
    /// outage (waits out the backoff, then probes when that helps).
    async fn on_error(
        &mut self,
        outage: &mut Outage,
        err: watcher::Error,
    ) -> Result<(), ClusterError> {
        let label = self.source.label();
        if self.source == Source::Policies && is_not_found(&err) {
            // The API server answered: the source is reachable, the
            // resource type is simply not there (yet).
            self.success(outage);
            if !outage.crd_missing {
                tracing::info!("HighAvailabilityPolicy CRD not installed; using ConfigMaps only");
                outage.crd_missing = true;
            }
            self.send(Msg::Watch(self.source, WatchEvent::Missing))?;
            tokio::time::sleep(outage.crd_backoff.next_delay()).await;
            return Ok(());
        }
        // 410 Gone: the resourceVersion expired, the watcher relists at
        // once. Routine, not an outage.
        if matches!(&err, watcher::Error::WatchError(s) if s.code == 410) {
            tracing::debug!(
                source = label,
                scope = self.scope,
                "watch expired (410 Gone); relisting"
            );
            return Ok(());
        }
        self.metrics.watch_error(label);
        self.metrics.set_up(label, false);
        let delay = outage.backoff.next_delay();
        if outage.up != Some(false) {
            tracing::warn!(
                source = label,
                scope = self.scope,
                error = %err,
                "watch failed; the last known policies stay in force; retrying with backoff"
            );
        } else {
            tracing::debug!(source = label, scope = self.scope, error = %err,
                retry_in_ms = delay.as_millis() as u64, "watch still failing");
        }
        outage.up = Some(false);
        tokio::time::sleep(delay).await;
        // A failed (re)start of the watch rather than a list: a later
        // successful watch start says nothing until an object changes, so
        // a cheap list checks whether the API server answers again.
        if matches!(
            err,
            watcher::Error::WatchStartFailed(_) | watcher::Error::WatchFailed(_)
        ) {
            let lp = ListParams::default().limit(1);
            if let Ok(Ok(_)) = tokio::time::timeout(PROBE_TIMEOUT, self.api.list(&lp)).await {
                self.success(outage);
            }
        }
        Ok(())
    }

    /// The bookkeeping of one watcher event: every event but `Init` (emitted
    /// before the list is even requested) is an answer of the API server.
    fn on_event(&self, outage: &mut Outage, event: &watcher::Event<K>) {
        if matches!(event, watcher::Event::Init) {
            return;
        }
        self.success(outage);
        if matches!(event, watcher::Event::InitDone) {
            outage.crd_backoff.reset();
            if outage.crd_missing {
                tracing::info!(
                    "HighAvailabilityPolicy CRD installed; watching HighAvailabilityPolicies"
                );
                outage.crd_missing = false;
            }
            tracing::debug!(
                source = self.source.label(),
                scope = self.scope,
                "list complete"
            );
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
