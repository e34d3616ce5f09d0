//! The HTTPS admission server (`knative-ha-webhook serve`).
//!
//! - [`Config`]: everything the server needs, built from [`ServeArgs`].
//! - [`Server::bind`] binds both listeners, loads the certificate and the
//!   policy; [`Server::run`] serves until the given shutdown future
//!   completes, then drains (see [`Server::run`]).
//! - [`router`]: the HTTPS routes alone, for in-process tests.

mod budget;
mod conn;
mod limits;
mod listener;
pub mod probes;
mod process;
mod routes;
mod slots;
mod stall;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

pub use budget::{Budget, DEFAULT_BUDGET_BYTES, DEFAULT_BUDGET_WAIT};
pub use limits::Limits;
pub use process::{run_cli, shutdown_signal};
pub use routes::{AppState, http_answer, router, router_with_budget};

use crate::admission::{OnError, ReviewOptions};
use crate::sources::file::FileSource;
use crate::store::{PolicyStore, Snapshot};
use crate::telemetry::{LogFormat, Metrics};
use crate::tls::{TlsReloader, TlsSource};

#[derive(clap::Args, Debug, Clone)]
pub struct ServeArgs {
    /// Policy file (YAML); re-read when it changes. Without it, policies are
    /// read from the cluster (HighAvailabilityPolicy resources and labelled ConfigMaps).
    #[arg(long, env = "KHW_POLICY_FILE")]
    pub policy_file: Option<PathBuf>,
    /// Certificate chain (PEM, leaf first); reloaded when it changes.
    #[arg(
        long,
        env = "KHW_TLS_CERT",
        requires = "tls_key",
        conflicts_with = "self_signed"
    )]
    pub tls_cert: Option<PathBuf>,
    /// Private key (PEM: PKCS#8, PKCS#1 or SEC1); reloaded when it changes.
    #[arg(
        long,
        env = "KHW_TLS_KEY",
        requires = "tls_cert",
        conflicts_with = "self_signed"
    )]
    pub tls_key: Option<PathBuf>,
    /// Require client certificates signed by this CA bundle (PEM); reloaded when it changes.
    #[arg(long, env = "KHW_CLIENT_CA")]
    pub client_ca: Option<PathBuf>,
    /// Generate an in-memory certificate for localhost, 127.0.0.1 and ::1
    /// and write its CA certificate (PEM) to this file.
    #[arg(long, env = "KHW_SELF_SIGNED", value_name = "CA_OUT")]
    pub self_signed: Option<PathBuf>,
    /// HTTPS address (POST /mutate).
    #[arg(long, env = "KHW_LISTEN", default_value = "0.0.0.0:8443")]
    pub listen: SocketAddr,
    /// Plain HTTP address for /metrics, /healthz and /readyz.
    #[arg(long, env = "KHW_METRICS_LISTEN", default_value = "0.0.0.0:9090")]
    pub metrics_listen: SocketAddr,
    /// After SIGTERM/SIGINT: keep serving (with /readyz failing) this long
    /// before closing the listener, e.g. `10s`, `1m30s`, `500ms`, `0s`.
    #[arg(long, env = "KHW_SHUTDOWN_DELAY", default_value = "10s", value_parser = parse_duration)]
    pub shutdown_delay: Duration,
    /// Log format.
    #[arg(long, env = "KHW_LOG_FORMAT", value_enum, default_value = "json")]
    pub log_format: LogFormat,
    /// What to answer when the patch cannot be computed: admit unchanged
    /// (with a warning) or refuse.
    #[arg(long, env = "KHW_ON_ERROR", value_enum, default_value = "allow")]
    pub on_error: OnError,
    /// The webhook's own namespace (where policy ConfigMaps and the
    /// reconciler's Lease are). `--namespace` is accepted as an alias.
    #[arg(
        long = "webhook-namespace",
        alias = "namespace",
        value_name = "NS",
        env = "POD_NAMESPACE"
    )]
    pub namespace: Option<String>,
    /// The only namespaces this webhook may govern (comma-separated). Policies
    /// for others are refused (cluster: `Ready=False`, reason `NotGoverned`;
    /// policy file: an error); admission and reconcile never act elsewhere.
    /// Unset: every namespace a policy names.
    #[arg(
        long,
        env = "KHW_GOVERNED_NAMESPACES",
        value_delimiter = ',',
        value_name = "NS,..."
    )]
    pub governed_namespaces: Vec<String>,
    #[command(flatten)]
    pub reconcile: crate::reconcile::ReconcileArgs,
}

/// Parses a Go-style duration (`10s`, `1m30s`, `1.5s`, `250ms`, `0`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err("empty duration".to_string());
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_len == 0 {
            return Err(format!(
                "invalid duration {text:?}: expected a number at {rest:?}"
            ));
        }
        let value: f64 = rest[..num_len].parse().map_err(|_| {
            format!(
                "invalid duration {text:?}: bad number {:?}",
                &rest[..num_len]
            )
        })?;
        rest = &rest[num_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "" => {
                return Err(format!(
                    "invalid duration {text:?}: missing unit (e.g. 10s)"
                ));
            }
            u => return Err(format!("invalid duration {text:?}: unknown unit {u:?}")),
        };
        rest = &rest[unit_len..];
        total += value * unit;
    }
    Duration::try_from_secs_f64(total).map_err(|e| format!("invalid duration {text:?}: {e}"))
}

/// Default connection cap of the metrics/probe listener.
pub const METRICS_MAX_CONNECTIONS: usize = 32;

/// Where policies come from.
#[derive(Clone, Debug)]
pub enum PolicySource {
    /// A policy file, polled for changes.
    File(PathBuf),
    /// The cluster (HighAvailabilityPolicy resources and labelled ConfigMaps).
    Cluster { namespace: String },
    /// A store managed by the caller (tests, embedding).
    Store(PolicyStore),
}

/// Everything the server needs.
#[derive(Clone, Debug)]
pub struct Config {
    pub listen: SocketAddr,
    pub metrics_listen: SocketAddr,
    pub tls: TlsSource,
    pub policy: PolicySource,
    pub shutdown_delay: Duration,
    /// After the listener closed: how long in-flight requests may take.
    pub drain_timeout: Duration,
    pub on_error: OnError,
    /// Limits of the HTTPS listener.
    pub limits: Limits,
    /// Connection cap of the metrics/probe listener (same deadlines as `limits`).
    pub metrics_max_connections: usize,
    /// Bytes of request bodies in flight, at most (see [`Budget`]).
    pub body_budget_bytes: usize,
    /// How long a request waits for body budget before a 503.
    pub body_budget_wait: Duration,
    pub tls_poll_interval: Duration,
    pub policy_poll_interval: Duration,
    /// Bring existing objects in line (`--reconcile`); None when off.
    pub reconcile: Option<crate::reconcile::ReconcileConfig>,
    /// `--governed-namespaces`.
    pub governed: crate::sources::Governed,
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(
        "no certificate: pass --tls-cert and --tls-key, or --self-signed CA_OUT for a local test"
    )]
    NoCertificate,
    #[error(
        "the webhook's namespace is unknown: pass --webhook-namespace or set POD_NAMESPACE (needed without --policy-file)"
    )]
    NoNamespace,
    #[error("binding {what} {addr}: {error}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    #[error(transparent)]
    Policy(#[from] crate::sources::file::FileSourceError),
    #[error(
        "no Kubernetes configuration found (in-cluster or kubeconfig): {0}; \
         pass --policy-file to run without a cluster"
    )]
    Kube(String),
    #[error("cluster policy source failed: {0}")]
    ClusterSource(String),
    #[error("serving metrics: {0}")]
    Metrics(std::io::Error),
    #[error(transparent)]
    Reconcile(#[from] crate::reconcile::ReconcileError),
}

impl Config {
    /// Builds the configuration from the command line.
    pub fn from_args(args: &ServeArgs) -> Result<Config, ServerError> {
        let tls = match (&args.tls_cert, &args.tls_key, &args.self_signed) {
            (Some(cert), Some(key), _) => TlsSource::Files {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: args.client_ca.clone(),
            },
            (_, _, Some(ca_out)) => TlsSource::SelfSigned {
                ca_out: ca_out.clone(),
                client_ca: args.client_ca.clone(),
            },
            _ => return Err(ServerError::NoCertificate),
        };
        let governed = crate::sources::Governed::from_flag(&args.governed_namespaces);
        let policy = match &args.policy_file {
            Some(path) => PolicySource::File(path.clone()),
            None => {
                let namespace = crate::sources::cluster::own_namespace(args.namespace.as_deref())
                    .ok_or(ServerError::NoNamespace)?;
                PolicySource::Cluster { namespace }
            }
        };
        Ok(Config {
            listen: args.listen,
            metrics_listen: args.metrics_listen,
            tls,
            policy,
            shutdown_delay: args.shutdown_delay,
            drain_timeout: Duration::from_secs(30),
            on_error: args.on_error,
            limits: Limits::default(),
            metrics_max_connections: METRICS_MAX_CONNECTIONS,
            body_budget_bytes: DEFAULT_BUDGET_BYTES,
            body_budget_wait: DEFAULT_BUDGET_WAIT,
            tls_poll_interval: Duration::from_millis(500),
            policy_poll_interval: crate::sources::file::POLL_INTERVAL,
            reconcile: crate::reconcile::ReconcileConfig::from_args(
                &args.reconcile,
                args.namespace.as_deref(),
            )?
            .map(|r| r.governed(governed.clone())),
            governed,
        })
    }

    /// A configuration for tests: loopback listeners on free ports, short
    /// poll intervals, no shutdown delay.
    pub fn for_tests(tls: TlsSource, policy: PolicySource) -> Config {
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        Config {
            listen: loopback,
            metrics_listen: loopback,
            tls,
            policy,
            shutdown_delay: Duration::ZERO,
            drain_timeout: Duration::from_secs(30),
            on_error: OnError::Allow,
            limits: Limits::default(),
            metrics_max_connections: METRICS_MAX_CONNECTIONS,
            body_budget_bytes: DEFAULT_BUDGET_BYTES,
            body_budget_wait: DEFAULT_BUDGET_WAIT,
            tls_poll_interval: Duration::from_millis(200),
            policy_poll_interval: Duration::from_millis(200),
            reconcile: None,
            governed: crate::sources::Governed::all(),
        }
    }
}

/// A bound, loaded server, ready to [`Server::run`].
pub struct Server {
    config: Config,
    listener: TcpListener,
    metrics_listener: TcpListener,
    store: PolicyStore,
    metrics: Metrics,
    registry: Arc<Registry>,
    tls: Arc<TlsReloader>,
    shutting_down: Arc<AtomicBool>,
    file_source: Option<FileSource>,
    cluster: Option<(
        kube::Client,
        crate::sources::cluster::ClusterMetrics,
        String,
    )>,
    reconciler: Option<crate::reconcile::Reconciler>,
}

impl Server {
    /// Binds the listeners, loads the certificate (a missing or bad file is
    /// retried in the background; the server is not ready meanwhile) and
    /// the policy (an invalid policy file is an error).
    pub async fn bind(config: Config) -> Result<Server, ServerError> {
        crate::tls::install_crypto_provider();
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);

        let (store, file_source, cluster) = match &config.policy {
            PolicySource::Store(store) => (store.clone(), None, None),
            PolicySource::File(path) => {
                let store = PolicyStore::new(Snapshot::default());
                let src = FileSource::start_governed(
                    path.clone(),
                    store.clone(),
                    metrics.clone(),
                    config.governed.clone(),
                )?;
                (store, Some(src), None)
            }
            PolicySource::Cluster { namespace } => {
                let client = kube::Client::try_default()
                    .await
                    .map_err(|e| ServerError::Kube(e.to_string()))?;
                let cm = crate::sources::cluster::ClusterMetrics::register(&mut registry);
                let store = PolicyStore::new(Snapshot::default());
                (store, None, Some((client, cm, namespace.clone())))
            }
        };

        let cluster_client = cluster.as_ref().map(|c| c.0.clone());
        let reconciler = crate::reconcile::Reconciler::prepare(
            config.reconcile.as_ref(),
            cluster_client,
            &store,
            &mut registry,
        )
        .await
        .map_err(|e| ServerError::Kube(e.to_string()))?;
        let tls = TlsReloader::new(config.tls.clone(), metrics.clone())?;
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|error| ServerError::Bind {
                    what: "HTTPS listener",
                    addr: config.listen,
                    error,
                })?;
        let metrics_listener = TcpListener::bind(config.metrics_listen)
            .await
            .map_err(|error| ServerError::Bind {
                what: "metrics listener",
                addr: config.metrics_listen,
                error,
            })?;
        Ok(Server {
            config,
            listener,
            metrics_listener,
            store,
            metrics,
            registry: Arc::new(registry),
            tls,
            shutting_down: Arc::new(AtomicBool::new(false)),
            file_source,
            cluster,
            reconciler,
        })
    }

    /// The bound HTTPS address.
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().unwrap_or(self.config.listen)
    }

    /// The bound metrics/probes address.
    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics_listener
            .local_addr()
            .unwrap_or(self.config.metrics_listen)
    }

    /// The policy store the server reads.
    pub fn store(&self) -> PolicyStore {
        self.store.clone()
    }

    /// Serves until `shutdown` completes, then: `/readyz` fails at once,
    /// requests keep being served for `shutdown_delay`, the listener closes,
    /// open connections are closed gracefully and in-flight requests get up
    /// to `drain_timeout` to finish.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), ServerError> {
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
        let mut background = tokio::task::JoinSet::new();
        if let TlsSource::Files { .. } = config.tls {
            background.spawn(tls.clone().watch(config.tls_poll_interval));
        }
        if let Some(src) = file_source {
            background.spawn(src.watch(config.policy_poll_interval));
        }
        let (cluster_err_tx, mut cluster_err_rx) = tokio::sync::mpsc::channel::<String>(1);
        if let Some((client, cm, namespace)) = cluster {
            let cfg = crate::sources::cluster::ClusterSourceConfig {
                namespace,
                governed: config.governed.clone(),
            };
            let store = store.clone();
            background.spawn(async move {
                let res = crate::sources::cluster::run(client, cfg, store, cm).await;
                let msg = match res {
                    Ok(()) => "stopped".to_string(),
                    Err(e) => format!("{e:#}"),
                };
                let _ = cluster_err_tx.send(msg).await;
            });
        }

        let reconciler = reconciler.map(crate::reconcile::Reconciler::spawn);

        let readiness = probes::Readiness {
            store: store.clone(),
            tls: Some(tls.clone()),
            shutting_down: shutting_down.clone(),
            metrics: metrics.clone(),
        };
        let metrics_addr = metrics_listener.local_addr().ok();
        let (metrics_stop_tx, metrics_stop_rx) = watch::channel(false);
        let (_never_draining, not_draining) = watch::channel(false);
        let metrics_limits = config.limits.for_metrics(config.metrics_max_connections);
        let probes = listener::Listener {
            listener: metrics_listener,
            tls: None,
            shared: conn_shared(
                probes::router(readiness, registry),
                not_draining,
                None,
                metrics_limits,
            ),
            live: Arc::new(Semaphore::new(listener::LIVE_MAX as usize)),
            name: "metrics",
        };
        let metrics_task = tokio::spawn(probes.run(metrics_stop_rx.clone(), metrics_stop_rx));

        let state = AppState {
            store,
            metrics: metrics.clone(),
            options: ReviewOptions {
                on_error: config.on_error,
            },
        };
        let budget = Budget::new(config.body_budget_bytes, config.body_budget_wait);
        let live = Arc::new(Semaphore::new(listener::LIVE_MAX as usize));
        let (stop_accept_tx, stop_accept_rx) = watch::channel(false);
        let (close_tx, close_rx) = watch::channel(false);
        let (draining_tx, draining_rx) = watch::channel(false);
        let https = listener::Listener {
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
        };
        let bound = https.listener.local_addr().ok();
        let metrics_bound = metrics_addr;
        let accept_task = tokio::spawn(https.run(stop_accept_rx, close_rx));
        tracing::info!(
            listen = %bound.map(|a| a.to_string()).unwrap_or_default(),
            metrics_listen = %metrics_bound.map(|a| a.to_string()).unwrap_or_default(),
            "serving POST /mutate over HTTPS"
        );

        let mut failure = None;
        tokio::select! {
            _ = shutdown => {}
            Some(msg) = cluster_err_rx.recv() => {
                tracing::error!(error = %msg, "cluster policy source failed; shutting down");
                failure = Some(ServerError::ClusterSource(msg));
            }
        }

        shutting_down.store(true, Ordering::SeqCst);
        let _ = draining_tx.send(true);
        if let Some(r) = reconciler {
            r.stop(Duration::from_secs(5)).await; // gives the Lease up
        }
        tracing::info!(
            delay_ms = config.shutdown_delay.as_millis() as u64,
            "shutting down: readiness now fails; still serving during the shutdown delay"
        );
        if failure.is_none() {
            tokio::time::sleep(config.shutdown_delay).await;
        }
        let _ = stop_accept_tx.send(true);
        let _ = accept_task.await;
        let _ = close_tx.send(true);
        let drained =
            tokio::time::timeout(config.drain_timeout, live.acquire_many(listener::LIVE_MAX)).await;
        match drained {
            Ok(_) => tracing::info!("all connections closed"),
            Err(_) => tracing::warn!(
                timeout_ms = config.drain_timeout.as_millis() as u64,
                "drain timeout: closing remaining connections"
            ),
        }
        background.abort_all();
        let _ = metrics_stop_tx.send(true);
        let _ = metrics_task.await;
        match failure {
            Some(e) => Err(e),
            None => Ok(()),
        }
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

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations() {
        let ok: &[(&str, Duration)] = &[
            ("0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("10s", Duration::from_secs(10)),
            ("1m30s", Duration::from_secs(90)),
            ("250ms", Duration::from_millis(250)),
            ("1.5s", Duration::from_millis(1500)),
            ("1h", Duration::from_secs(3600)),
        ];
        for (text, want) in ok {
            assert_eq!(parse_duration(text).unwrap(), *want, "{text}");
        }
        for bad in ["", "10", "s", "10x", "-1s", "1..2s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
