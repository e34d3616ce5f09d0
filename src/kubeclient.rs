//! The kube client of every command (`serve` too), built the way kubectl finds
//! its cluster: `--kubeconfig FILE`, else `KUBECONFIG`, else
//! `~/.kube/config`, else the in-cluster service account; `--context`
//! picks a context; `--request-timeout` bounds connecting and reading.
//!
//! Errors say which file, context or server is at fault and what to do,
//! not which library layer failed.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::errors::InWords;
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};

/// Where to find the cluster, as the flags and the environment say.
#[derive(Clone, Debug, Default)]
pub struct KubeSettings {
    /// `--kubeconfig`.
    pub kubeconfig: Option<PathBuf>,
    /// `KUBECONFIG` when set and not empty (paths separated like `PATH`).
    pub kubeconfig_env: Option<String>,
    /// `~/.kube/config`, and whether it exists.
    pub default_path: Option<PathBuf>,
    pub default_exists: bool,
    /// Running in a pod (`KUBERNETES_SERVICE_HOST` is set).
    pub in_cluster: bool,
    /// `--context`.
    pub context: Option<String>,
    /// `--request-timeout`.
    pub request_timeout: Option<Duration>,
}

/// Why no client could be built, or the API server could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum KubeClientError {
    #[error(
        "no kubeconfig found (KUBECONFIG is not set, {default} does not exist and this is not running in a pod); pass --kubeconfig FILE or set KUBECONFIG"
    )]
    NoConfig { default: String },
    /// The kubeconfig could not be read or parsed; the cause in the user's words.
    #[error("cannot read kubeconfig {path} (pass --kubeconfig FILE or fix KUBECONFIG)")]
    Read {
        path: String,
        #[source]
        reason: InWords,
    },
    #[error(
        "context {context:?} is not in kubeconfig {path}; `kubectl config get-contexts` lists the contexts"
    )]
    NoContext { context: String, path: String },
    #[error("kubeconfig {path} has no current-context; pass --context NAME")]
    NoCurrentContext { path: String },
    #[error("kubeconfig {path}")]
    Kubeconfig {
        path: String,
        #[source]
        source: KubeconfigError,
    },
    #[error("in-cluster configuration")]
    InCluster {
        #[source]
        source: kube::config::InClusterError,
    },
    #[error("building the Kubernetes client for {server}")]
    Client {
        server: String,
        #[source]
        source: kube::Error,
    },
    /// No answer came; the cause in the user's words ([`reason`]).
    #[error("cannot reach the Kubernetes API server at {server}")]
    Unreachable {
        server: String,
        #[source]
        reason: InWords,
    },
}

pub type Result<T, E = KubeClientError> = std::result::Result<T, E>;

/// Which kubeconfig to read: the flag, the files `KUBECONFIG` names
/// (merged the way kubectl merges them, empty entries ignored; named as a
/// whole in messages), `~/.kube/config`; `None` for in-cluster.
fn locate(args: &KubeSettings) -> Result<Option<(String, Kubeconfig)>> {
    let read = |path: &Path| {
        let name = path.display().to_string();
        Kubeconfig::read_from(path)
            .map(|k| Some((name.clone(), k)))
            .map_err(|e| kubeconfig_error(&name, e))
    };
    if let Some(path) = &args.kubeconfig {
        return read(path);
    }
    if let Some(value) = &args.kubeconfig_env {
        let paths: Vec<PathBuf> = std::env::split_paths(value)
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        if paths.is_empty() {
            return Ok(None);
        }
        return paths
            .iter()
            .try_fold(Kubeconfig::default(), |merged, p| {
                Kubeconfig::read_from(p).and_then(|c| merged.merge(c))
            })
            .map(|k| Some((value.clone(), k)))
            .map_err(|e| kubeconfig_error(value, e));
    }
    match &args.default_path {
        Some(path) if args.default_exists => read(path),
        _ if args.in_cluster => Ok(None),
        default => Err(KubeClientError::NoConfig {
            default: default
                .as_ref()
                .map_or("~/.kube/config".into(), |p| p.display().to_string()),
        }),
    }
}

fn kubeconfig_error(path: &str, error: KubeconfigError) -> KubeClientError {
    let path = path.to_string();
    let read = |reason| KubeClientError::Read {
        path: path.clone(),
        reason: InWords(reason),
    };
    match error {
        KubeconfigError::ReadConfig(io, _) => read(match io.kind() {
            std::io::ErrorKind::NotFound => "no such file".into(),
            std::io::ErrorKind::PermissionDenied => "permission denied".into(),
            _ => io.to_string(),
        }),
        KubeconfigError::Parse(e) => read(format!("not valid YAML: {}", crate::yaml::error(&e, 0))),
        KubeconfigError::LoadContext(context) => KubeClientError::NoContext { context, path },
        KubeconfigError::CurrentContextNotSet => KubeClientError::NoCurrentContext { path },
        source => KubeClientError::Kubeconfig { path, source },
    }
}

/// Builds the client the flags select without a request (`serve`: its
/// watchers retry until the API server answers), and names the server it
/// talks to.
pub async fn client(args: &KubeSettings) -> Result<(kube::Client, String)> {
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
    let server = config.cluster_url.to_string();
    let server = server.trim_end_matches('/').to_string();
    let client = kube::Client::try_from(config).map_err(|source| KubeClientError::Client {
        server: server.clone(),
        source,
    })?;
    Ok((client, server))
}

/// Builds the client and checks the API server answers (any HTTP answer,
/// even an error status, counts as reachable).
pub async fn connect(args: &KubeSettings) -> Result<kube::Client> {
    let (client, server) = client(args).await?;
    match client.apiserver_version().await {
        Ok(_) | Err(kube::Error::Api(_)) => Ok(client),
        Err(source) => Err(KubeClientError::Unreachable {
            reason: InWords(reason(&source)),
            server,
        }),
    }
}

/// What a failed request met, in a user's words: the API server's message
/// and code, or why it could not be reached ([`reason`]).
pub fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} (HTTP {})", s.message, s.code),
        other => reason(other),
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
