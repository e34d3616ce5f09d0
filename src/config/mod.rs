//! Configuration: the command line ([`Cli`]; `serve`'s flags in `serve`)
//! and the environment ([`Env`]), turned into what each command runs with
//! by one pure function ([`parse`]).
//!
//! Only this layer reads environment variables (`POD_NAME`, `HOSTNAME`,
//! `KUBECONFIG`, ...) or files (the service account's namespace,
//! `/etc/hostname`) for configuration; library code gets values. (clap
//! reads the `KHW_*` and `POD_NAMESPACE` variables of the flags.)

mod commands;
mod env;
mod serve;

use std::time::Duration;

use crate::kubeclient::KubeSettings;

pub use commands::*;
pub use env::*;
pub use serve::*;

/// Why the command line and environment do not make a configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "no certificate: pass --tls-cert and --tls-key, or --self-signed CA_OUT for a local test"
    )]
    NoCertificate,
    #[error(
        "the webhook's namespace is unknown: pass --webhook-namespace or set POD_NAMESPACE (needed without --policy-file)"
    )]
    NoNamespace,
    #[error(
        "--reconcile needs the webhook's namespace (for its Lease): pass --webhook-namespace or set POD_NAMESPACE"
    )]
    ReconcileNoNamespace,
    #[error("--governed-namespaces: entry {entry:?} {why}")]
    GovernedNamespace { entry: String, why: &'static str },
}

pub type Result<T, E = ConfigError> = std::result::Result<T, E>;

/// What a command runs with.
#[derive(Debug)]
pub enum CommandConfig {
    Preview(PreviewArgs),
    Check(CheckArgs),
    Crd(CrdArgs),
    Serve(Box<ServeConfig>),
    Audit {
        args: AuditArgs,
        kube: KubeSettings,
    },
    /// `kube` is used by the cluster form only (`--namespace`).
    Restore {
        args: RestoreArgs,
        kube: KubeSettings,
    },
}

/// The configuration of the command `cli` names, with `env` for what the
/// flags leave to the environment. Reads nothing else.
pub fn parse(cli: Cli, env: &dyn Env) -> Result<CommandConfig> {
    Ok(match cli.command {
        Command::Preview(args) => CommandConfig::Preview(args),
        Command::Check(args) => CommandConfig::Check(args),
        Command::Crd(args) => CommandConfig::Crd(args),
        Command::Serve(args) => CommandConfig::Serve(Box::new(serve_config(&args, env)?)),
        Command::Audit(args) => CommandConfig::Audit {
            kube: kube_settings(&args.kube.cluster, args.kube.request_timeout, env),
            args,
        },
        Command::Restore(args) => CommandConfig::Restore {
            kube: kube_settings(&args.kube.cluster, args.kube.request_timeout, env),
            args,
        },
    })
}

/// Why a flag's value does not parse. clap prints the whole text after
/// `invalid value '...' for '--flag'` and never reads a cause, so each
/// message holds its reason.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FlagValueError {
    #[error("invalid duration {text:?}: {reason}")]
    Duration {
        text: String,
        reason: crate::policy::duration::DurationError,
    },
    #[error("invalid listen address {text:?}: missing the port ({LISTEN_FORMS})")]
    ListenNoPort { text: String },
    #[error("invalid listen address {text:?}: invalid port {port:?} ({LISTEN_FORMS})")]
    ListenPort { text: String, port: String },
    #[error(
        "invalid listen address {text:?}: a host name other than localhost is not looked up; give an IP address ({LISTEN_FORMS})"
    )]
    ListenHostName { text: String },
    #[error("invalid rate {text:?}: expected writes per second, e.g. 5")]
    RateNotANumber { text: String },
    #[error("invalid rate {text:?}: must be more than 0")]
    RateNotPositive { text: String },
    #[error(
        "invalid owner {text:?}: expected KIND/NAME with KIND KnativeServing or KnativeEventing, e.g. KnativeServing/knative-serving"
    )]
    OperatorOwner { text: String },
    #[error(
        "{text:?} is not a namespace name (DNS-1123 label: lowercase letters, digits and '-', at most 63 characters)"
    )]
    NamespaceName { text: String },
}

/// The listen address forms [`parse_listen`] takes, as its errors list them.
const LISTEN_FORMS: &str = "e.g. 0.0.0.0:8443, 127.0.0.1:8443, [::]:8443, :8443 or localhost:8443";

/// Parses a Go-style duration flag (`10s`, `1m30s`, `1.5s`, `250ms`, `0`;
/// surrounding blanks ignored) with [`crate::policy::duration`], the one
/// duration parser.
pub fn parse_duration(text: &str) -> Result<Duration, FlagValueError> {
    crate::policy::duration::parse_go_duration(text.trim())
        .map(|nanos| Duration::from_nanos(nanos as u64))
        .map_err(|reason| FlagValueError::Duration {
            text: text.to_string(),
            reason,
        })
}

/// `duration` as [`parse_duration`] reads it: whole seconds (`10s`), else
/// whole milliseconds (`1500ms`), else nanoseconds.
pub fn duration_text(duration: Duration) -> String {
    if duration.subsec_nanos() == 0 {
        format!("{}s", duration.as_secs())
    } else if duration.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", duration.as_millis())
    } else {
        format!("{}ns", duration.as_nanos())
    }
}

/// Parses `--operator-owner`: `KnativeServing/NAME` or
/// `KnativeEventing/NAME` (the Knative Operator's resources).
pub fn parse_operator_owner(text: &str) -> Result<(String, String), FlagValueError> {
    let refused = || FlagValueError::OperatorOwner { text: text.into() };
    let (kind, name) = text.split_once('/').ok_or_else(refused)?;
    let known = crate::knative_operator::RESOURCES
        .iter()
        .any(|(k, _)| *k == kind);
    if !known || name.is_empty() || name.contains('/') {
        return Err(refused());
    }
    Ok((kind.to_string(), name.to_string()))
}

/// Parses a listen address: `IP:PORT` (`0.0.0.0:8443`, `[::]:8443`), and
/// the forms Go servers and kubectl users write: `:PORT` (every IPv4
/// address, like the default) and `localhost:PORT` (127.0.0.1). Other host
/// names are refused rather than looked up.
pub fn parse_listen(text: &str) -> Result<std::net::SocketAddr, FlagValueError> {
    use std::net::{Ipv4Addr, SocketAddr};
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(FlagValueError::ListenNoPort { text: text.into() });
    };
    let bad_port = || FlagValueError::ListenPort {
        text: text.into(),
        port: port.into(),
    };
    let ip = match host {
        "" => Ipv4Addr::UNSPECIFIED,
        h if h.eq_ignore_ascii_case("localhost") => Ipv4Addr::LOCALHOST,
        _ if host.parse::<std::net::IpAddr>().is_ok() || host.starts_with('[') => {
            return Err(bad_port());
        }
        _ => return Err(FlagValueError::ListenHostName { text: text.into() }),
    };
    let port: u16 = port.parse().map_err(|_| bad_port())?;
    Ok(SocketAddr::from((ip, port)))
}

#[cfg(test)]
mod tests;
