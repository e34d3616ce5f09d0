//! With the API server unusable, the cluster source logs one warning per
//! outage and source, retries with the documented backoff (0.8 s doubling
//! up to 30 s, unit-tested in `watch.rs`), and says "reconnected" only
//! after the API server really answered again (never while it is still down).

use crate::support::cluster::{GROUP, HAPS, hap};
use crate::support::fakeapi;
use crate::support::wait_until_within;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fakeapi::FakeApi;
use knative_ha_webhook::sources::cluster::{self, ClusterMetrics, ClusterSourceConfig};
use knative_ha_webhook::store::PolicyStore;
use prometheus_client::registry::Registry;

const OWN_NS: &str = "khw-system";

/// Every log line written, as JSON text.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn lines(&self, message: &str) -> Vec<String> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .filter(|l| l.contains(&format!("\"message\":\"{message}")))
            .map(str::to_string)
            .collect()
    }
}

/// How long a check below waits: the backoff may be at 12.8 s or more when
/// the API server comes back.
const BACKOFF_WAIT: Duration = Duration::from_secs(60);

/// The watched sources (HPAs and config-leader-election: one watch each in
/// the policy's namespace).
const SOURCES: [&str; 5] = [
    "policies",
    "configmaps",
    "hpas",
    "config-leader-election",
    "poddisruptionbudgets",
];

/// The log subscriber is this test's alone: the default of the test's
/// thread and of every thread of its runtime (the runtime
/// `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]` builds), not
/// the global one, since the other tests of the crate run their own cluster
/// sources beside it.
///
/// A second, silent dispatcher stays registered for the test's life:
/// while exactly one dispatcher is registered, tracing-core 0.1.36 decides a
/// log call site's interest from the default of whichever thread reaches
/// it first (tokio-rs/tracing#3611). When another test's thread, without a
/// subscriber, logs "watch reconnected" first, the call site is cached as
/// never enabled and this test's capture misses the line (seen with
/// `--test-threads 6`: every source's `source_up` back at 1, no line).
/// With two registered, the interest is asked of both.
#[test]
fn one_warning_per_outage_backoff_and_a_real_reconnect() {
    let _second = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
    let logs = Captured::default();
    let writer = logs.clone();
    let dispatch = tracing::Dispatch::new(
        tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_env_filter("info,kube_client=off")
            .with_writer(move || writer.clone())
            .finish(),
    );
    let _default = tracing::dispatcher::set_default(&dispatch);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        // A runtime thread ends with the runtime: its default stays set.
        .on_thread_start(move || std::mem::forget(tracing::dispatcher::set_default(&dispatch)))
        .build()
        .expect("runtime")
        .block_on(outage_and_reconnect(logs));
}

async fn outage_and_reconnect(logs: Captured) {
    let api = Arc::new(FakeApi::start().await);
    api.create(GROUP, HAPS, hap("serving", "knative-serving", 3));
    let store = PolicyStore::default();
    let mut registry = Registry::default();
    let metrics = ClusterMetrics::register(&mut registry);
    let task = tokio::spawn(cluster::run(
        api.client().await,
        ClusterSourceConfig::new(OWN_NS),
        store.clone(),
        metrics,
    ));
    wait_until_within(BACKOFF_WAIT, "first sync", async || {
        store.load().synced.then_some(())
    })
    .await;

    // Outage: the API server is gone (connections closed, port refused)
    // for 7 s.
    api.stop().await;
    tokio::time::sleep(Duration::from_secs(7)).await;
    let failed = logs.lines("watch failed");
    let reconnected = logs.lines("watch reconnected");
    println!(
        "during 7 s of outage: {} 'watch failed', {} 'watch reconnected'",
        failed.len(),
        reconnected.len()
    );
    for source in SOURCES {
        let n = failed
            .iter()
            .filter(|l| l.contains(&format!("\"source\":\"{source}\"")))
            .count();
        assert_eq!(n, 1, "one warning per outage for {source}: {failed:#?}");
    }
    assert!(
        reconnected.is_empty(),
        "no 'reconnected' while the API server is down: {reconnected:#?}"
    );
    assert!(store.load().synced, "the last known policies stay in force");

    // The API server is back: one "reconnected" per source, after a real
    // answer.
    api.restart().await;
    wait_until_within(BACKOFF_WAIT, "a reconnect per source", async || {
        (logs.lines("watch reconnected").len() >= SOURCES.len()).then_some(())
    })
    .await;
    // Anything else in flight would show within a second.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let reconnected = logs.lines("watch reconnected");
    for source in SOURCES {
        let n = reconnected
            .iter()
            .filter(|l| l.contains(&format!("\"source\":\"{source}\"")))
            .count();
        assert_eq!(n, 1, "one reconnect for {source}: {reconnected:#?}");
    }
    assert_eq!(
        logs.lines("watch failed").len(),
        SOURCES.len(),
        "no new warning"
    );
    task.abort();
}
