//! The `serve` application: what the webhook process runs, wired from its
//! configuration. [`App::bind`] loads the certificate and the policy
//! source (a file or the cluster), prepares the reconciler and binds the
//! listeners ([`crate::server`], the transport); [`App::run`] starts them,
//! waits for the shutdown signal (`signals`) or a failed cluster source,
//! then shuts down in named steps.

mod run;
mod signals;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt as _;
use futures::future::BoxFuture;
use prometheus_client::registry::Registry;

pub use signals::shutdown_signal_then_exit;

use crate::admission::{OnError, ReviewOptions};
use crate::engine::Snapshot;
use crate::server::{AppState, Listeners, ServerError, Settings};
use crate::sources::cluster::{self, ClusterMetrics, ClusterSourceConfig};
use crate::sources::file::FileSource;
use crate::store::PolicyStore;
use crate::telemetry::Metrics;
use crate::tls::{TlsReloader, TlsSource};

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

/// Everything the application needs.
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
    /// What the two listeners run with: limits, the probe listener's
    /// connection cap, the body budget.
    pub server: Settings,
    pub tls_poll_interval: Duration,
    pub policy_poll_interval: Duration,
    /// Bring existing objects in line (`--reconcile`); None when off.
    pub reconcile: Option<crate::reconcile::ReconcileConfig>,
    /// `--governed-namespaces`.
    pub governed: crate::scope::AllowedNamespaces,
    /// `--undo-unclaimed`: where no policy object exists at all, admission
    /// undoes the engine's records (the reconciler's part is
    /// [`crate::reconcile::ReconcileConfig::undo_unclaimed`]).
    pub undo_unclaimed: bool,
    /// The pod's name (`POD_NAME`): the instance of the cluster source's
    /// Event reporter.
    pub pod_name: Option<String>,
}

/// `--listen`'s default: every IPv4 address, port 8443.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 8443);
/// `--metrics-listen`'s default: every IPv4 address, port 9090.
pub const DEFAULT_METRICS_LISTEN: SocketAddr =
    SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 9090);
/// `--shutdown-delay`'s default.
pub const DEFAULT_SHUTDOWN_DELAY: Duration = Duration::from_secs(10);

/// Why the application could not start, or stopped on its own.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Server(#[from] ServerError),
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    #[error(transparent)]
    Policy(#[from] crate::sources::file::FileSourceError),
    /// The cluster source or the reconciler needs a client and none was
    /// given to [`App::bind`] (the command builds it from configuration).
    #[error("{0} needs a Kubernetes client and none was given")]
    NoClient(&'static str),
    #[error("cluster policy source failed")]
    ClusterSource(#[source] crate::sources::cluster::ClusterError),
    #[error("cluster policy source failed: stopped")]
    ClusterSourceStopped,
}

pub type Result<T, E = AppError> = std::result::Result<T, E>;

impl Config {
    /// The production defaults around the certificate and the policy: the
    /// listeners on [`DEFAULT_LISTEN`] and [`DEFAULT_METRICS_LISTEN`],
    /// [`DEFAULT_SHUTDOWN_DELAY`], [`OnError::default`] and
    /// [`Settings::default`] (the `serve` flags' defaults are these).
    pub fn new(tls: TlsSource, policy: PolicySource) -> Config {
        Config {
            listen: DEFAULT_LISTEN,
            metrics_listen: DEFAULT_METRICS_LISTEN,
            tls,
            policy,
            shutdown_delay: DEFAULT_SHUTDOWN_DELAY,
            drain_timeout: Duration::from_secs(30),
            on_error: OnError::default(),
            server: Settings::default(),
            tls_poll_interval: Duration::from_millis(500),
            policy_poll_interval: crate::sources::file::POLL_INTERVAL,
            reconcile: None,
            governed: crate::scope::AllowedNamespaces::all(),
            undo_unclaimed: false,
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

/// A bound, loaded application, ready to [`App::run`].
pub struct App {
    config: Config,
    listeners: Listeners,
    state: AppState,
    registry: Arc<Registry>,
    tls: Arc<TlsReloader>,
    /// The certificate and policy file watchers and the cluster source,
    /// started by [`App::run`]; only the cluster source ends, on failure.
    background: Vec<BoxFuture<'static, Option<AppError>>>,
    reconciler: Option<crate::reconcile::Reconciler>,
}

impl App {
    /// Loads the certificate (a missing or bad file is retried in the
    /// background; the server is not ready meanwhile) and the policy (an
    /// invalid policy file is an error), prepares the reconciler and binds
    /// the listeners.
    ///
    /// `client` is the Kubernetes client of the cluster policy source and
    /// the reconciler; `None` when neither is configured.
    pub async fn bind(config: Config, client: Option<kube::Client>) -> Result<App> {
        crate::tls::install_crypto_provider();
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        // What the reconciler finds it may do per namespace, for the
        // cluster source's `Ready` conditions (the one link between the two).
        let findings = crate::findings::Board::default();
        let (store, mut background) = policy_source(
            &config,
            client.as_ref(),
            &metrics,
            &mut registry,
            findings.clone(),
        )?;
        let reconciler = match (&config.reconcile, client) {
            (None, _) => None,
            (Some(_), None) => return Err(AppError::NoClient("the reconciler")),
            (Some(rc), Some(client)) => Some(
                crate::reconcile::Reconciler::prepare(rc.clone(), client, &store, &mut registry)
                    .with_findings(findings),
            ),
        };
        let tls = TlsReloader::new(config.tls.clone(), metrics.clone())?;
        if let TlsSource::Files { .. } = config.tls {
            let watch = tls.clone().watch(config.tls_poll_interval);
            background.push(watch.map(|()| None).boxed());
        }
        let listeners = Listeners::bind(config.listen, config.metrics_listen).await?;
        let options = ReviewOptions {
            on_error: config.on_error,
            undo_unclaimed: config.undo_unclaimed,
        };
        Ok(App {
            config,
            listeners,
            state: AppState {
                store,
                metrics,
                options,
            },
            registry: Arc::new(registry),
            tls,
            background,
            reconciler,
        })
    }

    /// The bound HTTPS address.
    pub fn local_addr(&self) -> SocketAddr {
        self.listeners.local_addr().unwrap_or(self.config.listen)
    }

    /// The bound metrics/probes address.
    pub fn metrics_addr(&self) -> SocketAddr {
        self.listeners
            .metrics_addr()
            .unwrap_or(self.config.metrics_listen)
    }

    /// The policy store the server reads.
    pub fn store(&self) -> PolicyStore {
        self.state.store.clone()
    }
}

/// The store the routes read and what fills it: a caller's store, a
/// policy file's watcher, or the cluster source.
fn policy_source(
    config: &Config,
    client: Option<&kube::Client>,
    metrics: &Metrics,
    registry: &mut Registry,
    findings: crate::findings::Board,
) -> Result<(PolicyStore, Vec<BoxFuture<'static, Option<AppError>>>)> {
    let store = PolicyStore::new(Snapshot::default());
    let task = match &config.policy {
        PolicySource::Store(store) => return Ok((store.clone(), Vec::new())),
        PolicySource::File(path) => FileSource::start_governed(
            path.clone(),
            store.clone(),
            metrics.clone(),
            config.governed.clone(),
        )?
        .watch(config.policy_poll_interval)
        .map(|()| None)
        .boxed(),
        PolicySource::Cluster { namespace } => {
            let client = client
                .cloned()
                .ok_or(AppError::NoClient("the cluster policy source"))?;
            let source = ClusterSourceConfig {
                namespace: namespace.clone(),
                governed: config.governed.clone(),
                instance: config.pod_name.clone(),
                findings,
            };
            let run = cluster::run(
                client,
                source,
                store.clone(),
                ClusterMetrics::register(registry),
            );
            run.map(|ended| match ended {
                Ok(()) => Some(AppError::ClusterSourceStopped),
                Err(e) => Some(AppError::ClusterSource(e)),
            })
            .boxed()
        }
    };
    Ok((store, vec![task]))
}
