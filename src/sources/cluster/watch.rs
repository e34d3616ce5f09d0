//! One kube-runtime watcher per source, with the default backoff, turned
//! into [`Msg`]s for the state. Keeps `source_up` and `watch_errors`, logs
//! disconnects and reconnects, and treats a 404 on the policy resource as
//! "CRD not installed" (not fatal; retried with backoff).

use std::fmt::Debug;
use std::time::Duration;

use futures::StreamExt;
use kube::api::ListParams;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc::UnboundedSender;

use super::{Change, ClusterError, ClusterMetrics, Item, Msg, Source};

/// While a source is down, how often a cheap list (limit 1) checks whether
/// the API server answers again, so that `source_up` and the log show a
/// reconnect even when no object changes.
const PROBE_INTERVAL: Duration = Duration::from_secs(2);
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// True when the error says the resource itself does not exist.
fn is_not_found(err: &watcher::Error) -> bool {
    match err {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code == 404,
        _ => false,
    }
}

pub(crate) async fn run<K>(
    source: Source,
    api: Api<K>,
    config: watcher::Config,
    tx: UnboundedSender<Msg>,
    metrics: ClusterMetrics,
    convert: impl Fn(&K) -> (String, Item),
) -> Result<(), ClusterError>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let label = source.label();
    let mut stream = watcher(api.clone(), config).default_backoff().boxed();
    // None until the first successful event or error.
    let mut up: Option<bool> = None;
    let mut crd_missing = false;
    let mut probe = tokio::time::interval(PROBE_INTERVAL);
    probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let send = |change: Change| {
        tx.send(Msg::Watch(source, change))
            .map_err(|_| ClusterError::ChannelClosed("watch"))
    };
    let mark_up = |up: &mut Option<bool>| {
        if *up == Some(false) {
            tracing::info!(source = label, "watch reconnected");
        }
        *up = Some(true);
        metrics.set_up(label, true);
    };
    loop {
        tokio::select! {
            next = stream.next() => {
                let Some(next) = next else {
                    return Err(ClusterError::StreamEnded(label));
                };
                match next {
                    Ok(event) => {
                        mark_up(&mut up);
                        let change = match event {
                            watcher::Event::Init => Change::Init,
                            watcher::Event::InitApply(obj) => {
                                let (key, item) = convert(&obj);
                                Change::InitApply(key, item)
                            }
                            watcher::Event::InitDone => {
                                if crd_missing {
                                    tracing::info!(
                                        "HighAvailabilityPolicy CRD installed; watching HighAvailabilityPolicies"
                                    );
                                    crd_missing = false;
                                }
                                tracing::debug!(source = label, "list complete");
                                Change::InitDone
                            }
                            watcher::Event::Apply(obj) => {
                                let (key, item) = convert(&obj);
                                Change::Apply(key, item)
                            }
                            watcher::Event::Delete(obj) => Change::Delete(convert(&obj).0),
                        };
                        send(change)?;
                    }
                    Err(err) if source == Source::Policies && is_not_found(&err) => {
                        // The API server answered: the source is reachable, the
                        // resource type is simply not there (yet).
                        mark_up(&mut up);
                        if !crd_missing {
                            tracing::info!(
                                "HighAvailabilityPolicy CRD not installed; using ConfigMaps only"
                            );
                            crd_missing = true;
                        }
                        send(Change::Missing)?;
                    }
                    Err(err) => {
                        metrics.watch_error(label);
                        metrics.set_up(label, false);
                        if up != Some(false) {
                            tracing::warn!(
                                source = label,
                                error = %err,
                                "watch failed; the last known policies stay in force; retrying with backoff"
                            );
                        } else {
                            tracing::debug!(source = label, error = %err, "watch still failing");
                        }
                        up = Some(false);
                    }
                }
            }
            _ = probe.tick(), if up == Some(false) => {
                let lp = ListParams::default().limit(1);
                if let Ok(Ok(_)) = tokio::time::timeout(PROBE_TIMEOUT, api.list(&lp)).await {
                    mark_up(&mut up);
                }
            }
        }
    }
}
