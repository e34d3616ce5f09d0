//! The kube client of the command-line tools, built the way kubectl finds
//! its cluster: `--kubeconfig FILE`, else `KUBECONFIG`, else
//! `~/.kube/config`, else the in-cluster service account; `--context`
//! picks a context; `--request-timeout` bounds connecting and reading.
//!
//! Errors say which file, context or server is at fault and what to do,
//! not which library layer failed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};

/// Connection flags shared by the commands that talk to a cluster.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct KubeArgs {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config,
    /// then the in-cluster service account).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current-context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// How long to wait for the API server to connect and answer each
    /// request, e.g. `5s`, `1m` (default: no limit beyond the client's own).
    #[arg(long, value_name = "DURATION", value_parser = crate::server::parse_duration)]
    pub request_timeout: Option<Duration>,
}

/// Why no client could be built, or the API server could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum KubeClientError {
    #[error(
        "no kubeconfig found (KUBECONFIG is not set, {default} does not exist and this is not running in a pod); pass --kubeconfig FILE or set KUBECONFIG"
    )]
    NoConfig { default: String },
    #[error("cannot read kubeconfig {path}: {reason}; pass --kubeconfig FILE or fix KUBECONFIG")]
    Read { path: String, reason: String },
    #[error(
        "context {context:?} is not in kubeconfig {path}; `kubectl config get-contexts` lists the contexts"
    )]
    NoContext { context: String, path: String },
    #[error("kubeconfig {path} has no current-context; pass --context NAME")]
    NoCurrentContext { path: String },
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        path: String,
        #[source]
        source: KubeconfigError,
    },
    #[error("in-cluster configuration: {source}")]
    InCluster {
        #[source]
        source: kube::config::InClusterError,
    },
    #[error("building the Kubernetes client for {server}: {source}")]
    Client {
        server: String,
        #[source]
        source: kube::Error,
    },
    #[error("cannot reach the Kubernetes API server at {server}: {reason}")]
    Unreachable { server: String, reason: String },
}

/// A client and the server URL it talks to (for messages).
#[derive(Clone)]
pub struct Connected {
    pub client: kube::Client,
    pub server: String,
}

fn default_path() -> Option<PathBuf> {
    std::env::home_dir().map(|h| h.join(".kube").join("config"))
}

/// Which kubeconfig to read: the flag, `KUBECONFIG` (first path named, for
/// messages), `~/.kube/config`; `None` for in-cluster.
fn locate(args: &KubeArgs) -> Result<Option<(String, Kubeconfig)>, KubeClientError> {
    let read = |path: &Path| {
        let name = path.display().to_string();
        Kubeconfig::read_from(path)
            .map(|k| Some((name.clone(), k)))
            .map_err(|e| kubeconfig_error(&name, e))
    };
    if let Some(path) = &args.kubeconfig {
        return read(path);
    }
    if let Some(value) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
        let name = value.to_string_lossy().into_owned();
        return match Kubeconfig::from_env() {
            Ok(Some(k)) => Ok(Some((name, k))),
            Ok(None) => Ok(None),
            Err(e) => Err(kubeconfig_error(&name, e)),
        };
    }
    let default = default_path();
    match &default {
        Some(path) if path.exists() => read(path),
        _ if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() => Ok(None),
        _ => Err(KubeClientError::NoConfig {
            default: default.map_or("~/.kube/config".into(), |p| p.display().to_string()),
        }),
    }
}

fn kubeconfig_error(path: &str, error: KubeconfigError) -> KubeClientError {
    let path = path.to_string();
    match error {
        KubeconfigError::ReadConfig(io, _) => KubeClientError::Read {
            path,
            reason: io_reason(&io),
        },
        KubeconfigError::Parse(e) => KubeClientError::Read {
            path,
            reason: format!("not valid YAML: {}", crate::yaml::describe(&e, 0)),
        },
        KubeconfigError::LoadContext(context) => KubeClientError::NoContext { context, path },
        KubeconfigError::CurrentContextNotSet => KubeClientError::NoCurrentContext { path },
        source => KubeClientError::Kubeconfig { path, source },
    }
}

fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

/// The kube configuration the flags select.
pub async fn config(args: &KubeArgs) -> Result<kube::Config, KubeClientError> {
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let mut config = match locate(args)? {
        Some((path, kubeconfig)) => kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .map_err(|e| kubeconfig_error(&path, e))?,
        None => {
            kube::Config::incluster().map_err(|source| KubeClientError::InCluster { source })?
        }
    };
    if let Some(timeout) = args.request_timeout {
        config.connect_timeout = Some(timeout);
        config.read_timeout = Some(timeout);
        config.write_timeout = Some(timeout);
    }
    Ok(config)
}

/// Builds the client and checks the API server answers (any HTTP answer,
/// even an error status, counts as reachable).
pub async fn connect(args: &KubeArgs) -> Result<Connected, KubeClientError> {
    let config = config(args).await?;
    let server = config.cluster_url.to_string();
    let server = server.trim_end_matches('/').to_string();
    let client = kube::Client::try_from(config).map_err(|source| KubeClientError::Client {
        server: server.clone(),
        source,
    })?;
    match client.apiserver_version().await {
        Ok(_) | Err(kube::Error::Api(_)) => Ok(Connected { client, server }),
        Err(e) => Err(KubeClientError::Unreachable {
            reason: reason(&e),
            server,
        }),
    }
}

/// Why a request did not reach the API server, in a user's words:
/// "connection refused", "timed out", ... (the innermost I/O error).
pub fn reason(error: &kube::Error) -> String {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    let mut last = error.to_string();
    while let Some(e) = source {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
                std::io::ErrorKind::TimedOut => "timed out".into(),
                std::io::ErrorKind::ConnectionReset => "connection reset by the server".into(),
                _ => io.to_string(),
            };
        }
        let text = e.to_string();
        if text.contains("timed out") || text.contains("deadline has elapsed") {
            return "timed out".into();
        }
        last = text;
        source = e.source();
    }
    last
}
