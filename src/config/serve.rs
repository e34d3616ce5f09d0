//! `serve` flags, and the server configuration built from them and the
//! environment.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

use super::env::Env;
use super::{ConfigError, Result};
use crate::app::{self, PolicySource};
use crate::policy::validate::is_dns1123_label;
use crate::reconcile::{LEASE_NAME, LeaseConfig, POLL_INTERVAL, ReconcileConfig};
use crate::scope::AllowedNamespaces;
use crate::tls::TlsSource;

/// Where Kubernetes mounts the pod's namespace with its service account token.
pub const SA_NAMESPACE_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
/// The host's name outside a pod when `HOSTNAME` is not set.
pub const HOSTNAME_FILE: &str = "/etc/hostname";

/// Log format (`--log-format`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormatArg {
    #[default]
    Json,
    Text,
}

impl From<LogFormatArg> for crate::telemetry::LogFormat {
    fn from(f: LogFormatArg) -> Self {
        match f {
            LogFormatArg::Json => crate::telemetry::LogFormat::Json,
            LogFormatArg::Text => crate::telemetry::LogFormat::Text,
        }
    }
}

/// What to answer when mutation fails internally (`--on-error`; its
/// default is [`crate::admission::OnError::default`], as a test checks).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnErrorArg {
    /// Admit the object unchanged, with a warning (never block the cluster).
    Allow,
    /// Refuse the object.
    Deny,
}

impl From<OnErrorArg> for crate::admission::OnError {
    fn from(o: OnErrorArg) -> Self {
        match o {
            OnErrorArg::Allow => crate::admission::OnError::Allow,
            OnErrorArg::Deny => crate::admission::OnError::Deny,
        }
    }
}

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
    /// HTTPS address (POST /mutate): IP:PORT, :PORT (every IPv4 address) or localhost:PORT.
    #[arg(long, env = "KHW_LISTEN", default_value_t = app::DEFAULT_LISTEN, value_parser = super::parse_listen)]
    pub listen: SocketAddr,
    /// Plain HTTP address for /metrics, /healthz and /readyz (forms as --listen).
    #[arg(long, env = "KHW_METRICS_LISTEN", default_value_t = app::DEFAULT_METRICS_LISTEN, value_parser = super::parse_listen)]
    pub metrics_listen: SocketAddr,
    /// After SIGTERM/SIGINT: keep serving (with /readyz failing) this long
    /// before closing the listener, e.g. `10s`, `1m30s`, `500ms`, `0s`.
    #[arg(long, env = "KHW_SHUTDOWN_DELAY", default_value = SHUTDOWN_DELAY_TEXT.as_str(), value_parser = super::parse_duration)]
    pub shutdown_delay: Duration,
    /// Log format.
    #[arg(long, env = "KHW_LOG_FORMAT", value_enum, default_value = "json")]
    pub log_format: LogFormatArg,
    /// What to answer when the patch cannot be computed: admit unchanged
    /// (with a warning) or refuse.
    #[arg(long, env = "KHW_ON_ERROR", value_enum, default_value_t = OnErrorArg::Allow)]
    pub on_error: OnErrorArg,
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
    /// Unset: every namespace a policy names. Every entry must be a
    /// namespace name: an empty list (`''`, `,`) is refused.
    #[arg(
        long,
        env = "KHW_GOVERNED_NAMESPACES",
        value_delimiter = ',',
        value_name = "NS,..."
    )]
    pub governed_namespaces: Vec<String>,
    /// Where no policy object names a namespace any more (its policy
    /// deleted): undo the webhook's changes there, at admission and with
    /// one reconciler pass. Off: a deleted policy changes nothing (the
    /// objects keep their values and records); `knative-ha-webhook restore`
    /// undoes.
    #[arg(long = "undo-unclaimed", env = "KHW_UNDO_UNCLAIMED")]
    pub undo_unclaimed: bool,
    #[command(flatten)]
    pub reconcile: ReconcileArgs,
    #[command(flatten)]
    pub cluster: super::KubeconfigArgs,
}

/// `serve` flags of the reconciler.
#[derive(clap::Args, Debug, Clone)]
pub struct ReconcileArgs {
    /// Bring governed objects that already exist in line with the policy
    /// (when a policy becomes effective or changes, and every
    /// --reconcile-interval). Only the replica holding the Lease
    /// `knative-ha-webhook-reconcile` writes.
    #[arg(long = "reconcile", env = "KHW_RECONCILE")]
    pub enabled: bool,
    /// How often every governed namespace is reconciled, e.g. `10m`.
    #[arg(long = "reconcile-interval", env = "KHW_RECONCILE_INTERVAL",
          default_value = "10m", value_parser = super::parse_duration)]
    pub interval: Duration,
    /// Only report drift (log lines, the drift metric); write nothing.
    #[arg(long = "reconcile-dry-run", env = "KHW_RECONCILE_DRY_RUN")]
    pub dry_run: bool,
    /// Also write pod template changes (anti-affinity, topology spread,
    /// --disable-ha), which roll the Deployment's pods. `false` leaves them
    /// out of the reconciler's patches.
    #[arg(long = "reconcile-pod-templates", env = "KHW_RECONCILE_POD_TEMPLATES",
          default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true", value_name = "BOOL")]
    pub pod_templates: bool,
    /// Writes per second at most.
    #[arg(long = "reconcile-rate", env = "KHW_RECONCILE_RATE", default_value_t = 5.0,
          value_parser = parse_rate)]
    pub rate: f64,
}

/// [`app::DEFAULT_SHUTDOWN_DELAY`] as `--shutdown-delay` writes it.
static SHUTDOWN_DELAY_TEXT: LazyLock<String> =
    LazyLock::new(|| super::duration_text(app::DEFAULT_SHUTDOWN_DELAY));

fn parse_rate(text: &str) -> std::result::Result<f64, super::FlagValueError> {
    let rate: f64 = text
        .trim()
        .parse()
        .map_err(|_| super::FlagValueError::RateNotANumber { text: text.into() })?;
    if !(rate.is_finite() && rate > 0.0) {
        return Err(super::FlagValueError::RateNotPositive { text: text.into() });
    }
    Ok(rate)
}

/// What `serve` runs with.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub log_format: crate::telemetry::LogFormat,
    pub app: app::Config,
    /// Where the cluster is, when the server needs it (policies from the
    /// cluster, or the reconciler); `None` for a policy file alone.
    pub kube: Option<crate::kubeclient::KubeSettings>,
}

/// The webhook's own namespace: `explicit` (`--webhook-namespace` /
/// `POD_NAMESPACE`) when set and non-empty, else the service account's
/// namespace file.
pub fn own_namespace(explicit: Option<&str>, env: &dyn Env) -> Option<String> {
    explicit
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .or_else(|| non_empty(env.read_file(SA_NAMESPACE_FILE.as_ref())))
}

/// This replica's identity (the Lease holder): `POD_NAME`, else the host
/// name (`HOSTNAME`, else `/etc/hostname`) and the process id.
pub fn identity(env: &dyn Env) -> String {
    if let Some(name) = env.var("POD_NAME").filter(|n| !n.is_empty()) {
        return name;
    }
    let host = env
        .var("HOSTNAME")
        .filter(|h| !h.is_empty())
        .or_else(|| non_empty(env.read_file(HOSTNAME_FILE.as_ref())))
        .unwrap_or_else(|| "unknown-host".to_string());
    format!("{host}-{}", env.process_id())
}

/// A file's text, trimmed, when not blank.
fn non_empty(value: Option<String>) -> Option<String> {
    value
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The server configuration of `serve`.
pub fn serve_config(args: &ServeArgs, env: &dyn Env) -> Result<ServeConfig> {
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
        _ => return Err(ConfigError::NoCertificate),
    };
    let governed = governed_namespaces(&args.governed_namespaces)?;
    let policy = match &args.policy_file {
        Some(path) => PolicySource::File(path.clone()),
        None => {
            let namespace =
                own_namespace(args.namespace.as_deref(), env).ok_or(ConfigError::NoNamespace)?;
            PolicySource::Cluster { namespace }
        }
    };
    let reconcile = reconcile_config(&args.reconcile, args.namespace.as_deref(), env)?.map(|r| {
        ReconcileConfig {
            undo_unclaimed: args.undo_unclaimed,
            ..r.governed(governed.clone())
        }
    });
    let app = app::Config {
        listen: args.listen,
        metrics_listen: args.metrics_listen,
        shutdown_delay: args.shutdown_delay,
        on_error: args.on_error.into(),
        reconcile,
        governed,
        undo_unclaimed: args.undo_unclaimed,
        pod_name: env.var("POD_NAME"),
        ..app::Config::new(tls, policy)
    };
    let needs_cluster =
        matches!(app.policy, PolicySource::Cluster { .. }) || app.reconcile.is_some();
    Ok(ServeConfig {
        log_format: args.log_format.into(),
        kube: needs_cluster.then(|| super::kube_settings(&args.cluster, None, env)),
        app,
    })
}

/// `--governed-namespaces`: no flag means every namespace; otherwise every
/// entry (blanks around it ignored) must be a namespace name. An empty entry
/// (`''`, `','`, `a,,b`) is refused rather than read as "no restriction".
pub fn governed_namespaces(values: &[String]) -> Result<AllowedNamespaces> {
    if values.is_empty() {
        return Ok(AllowedNamespaces::all());
    }
    for value in values {
        let entry = value.trim();
        let why = if entry.is_empty() {
            "is empty (to govern every namespace, leave out the flag and KHW_GOVERNED_NAMESPACES)"
        } else if entry.len() > 63 {
            "is not a namespace name: longer than 63 characters"
        } else if !is_dns1123_label(entry) {
            "is not a namespace name (DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit)"
        } else {
            continue;
        };
        return Err(ConfigError::GovernedNamespace {
            entry: entry.to_string(),
            why,
        });
    }
    Ok(AllowedNamespaces::only(values.iter().cloned()))
}

/// The reconciler's configuration; `None` when `--reconcile` is off.
/// `namespace` is `--webhook-namespace`; without it, the service account's.
pub fn reconcile_config(
    args: &ReconcileArgs,
    namespace: Option<&str>,
    env: &dyn Env,
) -> Result<Option<ReconcileConfig>> {
    if !args.enabled {
        return Ok(None);
    }
    let namespace = own_namespace(namespace, env).ok_or(ConfigError::ReconcileNoNamespace)?;
    Ok(Some(ReconcileConfig {
        interval: args.interval,
        dry_run: args.dry_run,
        pod_templates: args.pod_templates,
        rate: args.rate,
        lease: LeaseConfig {
            namespace,
            name: LEASE_NAME.to_string(),
            identity: identity(env),
            duration: Duration::from_secs(15),
            renew_every: Duration::from_secs(5),
        },
        poll: POLL_INTERVAL,
        operator_check: crate::reconcile::OPERATOR_CHECK_INTERVAL,
        settle: crate::reconcile::schedule::SETTLE,
        governed: AllowedNamespaces::all(),
        undo_unclaimed: false,
    }))
}
