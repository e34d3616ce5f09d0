//! The command line: every subcommand's flags (except `serve`'s, in
//! [`super::serve`]).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

use super::env::Env;
use crate::kubeclient::KubeSettings;

#[derive(Parser, Debug)]
#[command(
    name = "knative-ha-webhook",
    version,
    about = "Mutating admission webhook that makes Knative Serving's control plane highly available"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Show what a policy does to a set of manifests (offline).
    Preview(PreviewArgs),
    /// Validate policy files (policies or policy ConfigMaps): exit 0 when
    /// all are valid, 1 with every error otherwise.
    Check(CheckArgs),
    /// Print the HighAvailabilityPolicy CustomResourceDefinition.
    Crd(CrdArgs),
    /// Run the HTTPS admission server.
    Serve(Box<super::ServeArgs>),
    /// Report, per governed object, what differs from the policy: exit 0 when
    /// everything is in line, 1 when drift exists, 2 on errors.
    Audit(AuditArgs),
    /// Put what the webhook changed back to the release's values and remove
    /// its records: every governed object of one namespace in the cluster
    /// (`--namespace`), or manifests offline (FILE...). Run it with no
    /// policy governing the namespace, before uninstalling the webhook.
    /// Exit 0 when done (or nothing to do), 1 when `--dry-run` finds
    /// something to restore, 2 on errors.
    Restore(RestoreArgs),
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OutputFormat {
    /// Every input object, mutated where the policy applies (multi-document YAML).
    #[default]
    Yaml,
    /// The same objects as JSON: the object itself when there is one, else a
    /// `v1` List (as `kubectl get -o json` prints them).
    Json,
    /// One JSON object per line for each changed document.
    Patches,
}

#[derive(clap::Args, Debug)]
pub struct PreviewArgs {
    /// Policy file (YAML, may hold several documents, one policy per target
    /// namespace). Repeatable.
    #[arg(
        long = "policy-file",
        alias = "policy",
        value_name = "FILE",
        required = true
    )]
    pub policy: Vec<PathBuf>,
    /// What to print.
    #[arg(long, short = 'o', value_enum, default_value_t = OutputFormat::Yaml)]
    pub output: OutputFormat,
    /// Preview what happens on a Knative Operator install: every input
    /// object without an owner gets an ownerReference to this
    /// KnativeServing or KnativeEventing (KIND/NAME, e.g.
    /// KnativeServing/knative-serving), as the Operator's objects carry.
    #[arg(long = "operator-owner", value_name = "KIND/NAME", value_parser = super::parse_operator_owner)]
    pub operator_owner: Option<(String, String)>,
    /// Manifests (multi-document YAML; `kind: List` and typed lists are
    /// expanded); stdin when none or `-`.
    pub manifests: Vec<PathBuf>,
}

/// How `crd` prints.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CrdFormat {
    #[default]
    Yaml,
    Json,
}

#[derive(clap::Args, Debug)]
pub struct CrdArgs {
    /// What to print.
    #[arg(long, short = 'o', value_enum, default_value_t = CrdFormat::Yaml)]
    pub output: CrdFormat,
}

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// Policy files (YAML, several documents each; HighAvailabilityPolicy
    /// resources or policy ConfigMaps); `-` for standard input.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AuditFormat {
    /// One line per change, for people.
    #[default]
    Table,
    /// One JSON document, for tools.
    Json,
    /// The same document as YAML.
    Yaml,
}

#[derive(clap::Args, Debug, Clone)]
pub struct AuditArgs {
    /// Policy file(s) to compare against (YAML; repeatable). Without it,
    /// the policies in force in the cluster are used (HighAvailabilityPolicy
    /// resources and policy ConfigMaps).
    #[arg(long = "policy-file", alias = "policy", value_name = "FILE")]
    pub policy: Vec<PathBuf>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = AuditFormat::Table)]
    pub output: AuditFormat,
    /// Audit only this governed namespace.
    #[arg(long, short = 'n')]
    pub namespace: Option<String>,
    /// Where the webhook reads policy ConfigMaps (its own namespace).
    /// Default: labelled ConfigMaps in every namespace.
    #[arg(long, value_name = "NS")]
    pub webhook_namespace: Option<String>,
    #[command(flatten)]
    pub kube: KubeArgs,
}

#[derive(clap::Args, Debug, Clone)]
pub struct RestoreArgs {
    /// The namespace whose governed objects are restored (the cluster form).
    #[arg(
        long,
        short = 'n',
        value_name = "NS",
        required_unless_present = "manifests",
        conflicts_with = "manifests",
        value_parser = namespace_name
    )]
    pub namespace: Option<String>,
    /// Print what would be restored; write nothing.
    #[arg(long, conflicts_with = "manifests")]
    pub dry_run: bool,
    /// Output format (the cluster form).
    #[arg(long, short = 'o', value_enum, default_value_t = AuditFormat::Table)]
    pub output: AuditFormat,
    /// The offline form: manifests (`kubectl get -o yaml` output; `-` for
    /// standard input) printed back restored, as YAML; the changes go to
    /// standard error.
    #[arg(value_name = "FILE")]
    pub manifests: Vec<PathBuf>,
    #[command(flatten)]
    pub kube: KubeArgs,
}

/// A namespace name (DNS-1123 label), for `--namespace`.
fn namespace_name(text: &str) -> Result<String, super::FlagValueError> {
    if crate::policy::validate::is_dns1123_label(text) {
        Ok(text.to_string())
    } else {
        Err(super::FlagValueError::NamespaceName { text: text.into() })
    }
}

/// Which cluster: the flags every command that talks to one takes
/// (`serve`, `audit`, `restore`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct KubeconfigArgs {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config,
    /// then the in-cluster service account).
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current-context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
}

/// Connection flags of the one-shot commands (`audit`, `restore`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct KubeArgs {
    #[command(flatten)]
    pub cluster: KubeconfigArgs,
    /// How long to wait for the API server to connect and answer each
    /// request, e.g. `5s`, `1m` (default: no limit beyond the client's own).
    #[arg(long, value_name = "DURATION", value_parser = super::parse_duration)]
    pub request_timeout: Option<Duration>,
}

/// Where the kube client looks, the way kubectl does: the flag, else
/// `KUBECONFIG`, else `~/.kube/config`, else in-cluster.
/// `request_timeout` is `--request-timeout` (`serve` has none: its watches
/// are long requests).
pub fn kube_settings(
    args: &KubeconfigArgs,
    request_timeout: Option<Duration>,
    env: &dyn Env,
) -> KubeSettings {
    let default_path = env.home_dir().map(|h| h.join(".kube").join("config"));
    KubeSettings {
        kubeconfig: args.kubeconfig.clone(),
        kubeconfig_env: env.var("KUBECONFIG").filter(|v| !v.is_empty()),
        default_exists: default_path.as_deref().is_some_and(|p| env.exists(p)),
        default_path,
        in_cluster: env.var("KUBERNETES_SERVICE_HOST").is_some(),
        context: args.context.clone(),
        request_timeout,
    }
}
