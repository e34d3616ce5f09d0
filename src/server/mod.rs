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
mod run;
mod slots;
mod stall;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use budget::{Budget, DEFAULT_BUDGET_BYTES, DEFAULT_BUDGET_WAIT};
pub use limits::Limits;
pub use process::{shutdown_signal, shutdown_signal_then_exit};
pub use routes::{AppState, http_answer, router, router_with_budget};

use crate::admission::OnError;
use crate::sources::file::FileSource;
use crate::store::{PolicyStore, Snapshot};
use crate::telemetry::Metrics;
use crate::tls::{TlsReloader, TlsSource};

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
    pub governed: crate::scope::AllowedNamespaces,
    /// The pod's name (`POD_NAME`): the instance of the cluster source's
    /// Event reporter.
    pub pod_name: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("binding {what} {addr}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        #[source]
        error: std::io::Error,
    },
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    #[error(transparent)]
    Policy(#[from] crate::sources::file::FileSourceError),
    /// The cluster source or the reconciler needs a client and none was
    /// given to [`Server::bind`] (the command builds it from configuration).
    #[error("{0} needs a Kubernetes client and none was given")]
    NoClient(&'static str),
    #[error("cluster policy source failed")]
    ClusterSource(#[source] crate::sources::cluster::ClusterError),
    #[error("cluster policy source failed: stopped")]
    ClusterSourceStopped,
    #[error("serving metrics")]
    Metrics(#[source] std::io::Error),
}

pub type Result<T, E = ServerError> = std::result::Result<T, E>;

impl Config {
    /// The production defaults around the listeners' addresses
    /// (`0.0.0.0:8443`, `0.0.0.0:9090`), the certificate and the policy.
    pub fn new(tls: TlsSource, policy: PolicySource) -> Config {
        Config {
            listen: SocketAddr::from(([0, 0, 0, 0], 8443)),
            metrics_listen: SocketAddr::from(([0, 0, 0, 0], 9090)),
            tls,
            policy,
            shutdown_delay: Duration::from_secs(10),
            drain_timeout: Duration::from_secs(30),
            on_error: OnError::Allow,
            limits: Limits::default(),
            metrics_max_connections: METRICS_MAX_CONNECTIONS,
            body_budget_bytes: DEFAULT_BUDGET_BYTES,
            body_budget_wait: DEFAULT_BUDGET_WAIT,
            tls_poll_interval: Duration::from_millis(500),
            policy_poll_interval: crate::sources::file::POLL_INTERVAL,
            reconcile: None,
            governed: crate::scope::AllowedNamespaces::all(),
            pod_name: None,
        }
    }

    /// A configuration for tests: loopback listeners on free ports, short
    /// poll intervals, no shutdown delay.
    pub fn for_tests(tls: TlsSource, policy: PolicySource) -> Config {
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        Config {
            listen: loopback,
            metrics_listen: loopback,
            shutdown_delay: Duration::ZERO,
            tls_poll_interval: Duration::from_millis(200),
            policy_poll_interval: Duration::from_millis(200),
            ..Config::new(tls, policy)
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
    ///
    /// `client` is the Kubernetes client of the cluster policy source and
    /// the reconciler (built by the command from its configuration,
    /// [`crate::kubeclient`]); `None` when neither is configured.
    pub async fn bind(config: Config, client: Option<kube::Client>) -> Result<Server> {
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
                let client = client
                    .clone()
                    .ok_or(ServerError::NoClient("the cluster policy source"))?;
                let cm = crate::sources::cluster::ClusterMetrics::register(&mut registry);
                let store = PolicyStore::new(Snapshot::default());
                (store, None, Some((client, cm, namespace.clone())))
            }
        };

        let reconciler = match (&config.reconcile, client) {
            (None, _) => None,
            (Some(_), None) => return Err(ServerError::NoClient("the reconciler")),
            (Some(rc), Some(client)) => Some(crate::reconcile::Reconciler::prepare(
                rc.clone(),
                client,
                &store,
                &mut registry,
            )),
        };
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
