//! `knative-ha-webhook audit`: what differs, per governed object, between
//! the cluster and the policy. Exit code 0 when everything is in line, 1
//! when drift exists, 2 on errors.
//!
//! Policies come from `--policy-file` files, else from the cluster with a
//! one-shot list of HighAvailabilityPolicy resources and labelled policy
//! ConfigMaps, merged with the cluster source's rules
//! ([`crate::sources::cluster::merge`]; [`cluster_policies`]). The table
//! and the exit code: [`render_table`], [`exit_code`].

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use serde::Serialize;

use super::error::ReconcileError;
use super::objects;
use super::plan::{self, ChangeLine};
use crate::engine::Kind;
use crate::policy::Policy;

mod cluster;
mod output;

pub use cluster::cluster_policies;
pub use output::{exit_code, render_table};

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
    pub kube: crate::kubeclient::KubeArgs,
}

/// Errors of `audit` (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error(transparent)]
    Kube(#[from] crate::kubeclient::KubeClientError),
    #[error("{0}")]
    Policy(String),
    #[error("listing {what}: {}", list_reason(.source))]
    List {
        what: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("no policy found{0}: nothing to audit")]
    NoPolicy(String),
    #[error("namespace {0:?} is not governed by any policy")]
    NotGoverned(String),
    #[error(transparent)]
    Reconcile(#[from] ReconcileError),
}

/// The result of the audit's steps.
pub type Result<T, E = AuditError> = std::result::Result<T, E>;

/// Where the audited policy of a namespace comes from.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PolicyRef {
    pub namespace: String,
    pub policy: String,
    /// `file`, `HighAvailabilityPolicy/NAME` or `ConfigMap/NS/NAME`.
    pub source: String,
}

/// One object that differs from its policy.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectDrift {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub changes: Vec<ChangeLine>,
}

/// The audit's result.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditReport {
    /// True when no governed object differs from its policy.
    pub in_line: bool,
    pub policies: Vec<PolicyRef>,
    /// Governed objects looked at.
    pub objects: usize,
    pub drift: Vec<ObjectDrift>,
    /// Policy objects that are invalid or in conflict (not applied).
    pub warnings: Vec<String>,
}

/// A failed list in the user's words: the API server's own message and
/// code, or why it could not be reached ("connection refused", "timed out").
fn list_reason(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} (HTTP {})", s.message, s.code),
        other => crate::kubeclient::reason(other),
    }
}

/// Audits the governed objects of `policies` (optionally one namespace).
pub async fn audit(
    client: &kube::Client,
    policies: &[(Arc<Policy>, String)],
    namespace: Option<&str>,
) -> Result<AuditReport> {
    let mut report = AuditReport::default();
    let selected: Vec<&(Arc<Policy>, String)> = policies
        .iter()
        .filter(|(p, _)| namespace.is_none_or(|n| p.spec.target_namespace == n))
        .collect();
    if let Some(n) = namespace
        && selected.is_empty()
    {
        return Err(AuditError::NotGoverned(n.to_string()));
    }
    for (policy, source) in selected {
        let ns = &policy.spec.target_namespace;
        report.policies.push(PolicyRef {
            namespace: ns.clone(),
            policy: policy.name.clone(),
            source: source.clone(),
        });
        let listed = objects::list_namespace(client, ns).await?;
        let ctx = crate::engine::Context {
            hpa_targets: listed.hpa_targets.clone(),
        };
        for object in &listed.objects {
            report.objects += 1;
            let drift = plan::plan(policy, ns, object, &ctx, true).map_err(|error| {
                ReconcileError::Engine {
                    kind: Kind::of(object).map_or("object", Kind::as_str),
                    namespace: ns.clone(),
                    name: object["metadata"]["name"].as_str().unwrap_or("").into(),
                    source: Box::new(error),
                }
            })?;
            if let Some(d) = drift {
                report.drift.push(ObjectDrift {
                    kind: d.kind.as_str(),
                    namespace: d.namespace,
                    name: d.name,
                    changes: d.changes,
                });
            }
        }
    }
    report.in_line = report.drift.is_empty();
    Ok(report)
}

/// Loads the policies (files or cluster) and audits.
pub async fn run(args: &AuditArgs) -> Result<AuditReport> {
    let file_policies = if args.policy.is_empty() {
        None
    } else {
        let by_ns = crate::preview::load_policies(&args.policy)
            .map_err(|e| AuditError::Policy(format!("{e:#}")))?;
        Some(
            by_ns
                .into_values()
                .map(|p| (Arc::new(p), "file".to_string()))
                .collect::<Vec<_>>(),
        )
    };
    let client = crate::kubeclient::connect(&args.kube).await?.client;
    let (policies, warnings) = match file_policies {
        Some(p) => (p, Vec::new()),
        None => cluster_policies(&client, args.webhook_namespace.as_deref()).await?,
    };
    if policies.is_empty() {
        let where_ = if args.policy.is_empty() {
            " in the cluster (HighAvailabilityPolicy resources or ConfigMaps labelled knativeha.dev/policy=true)"
        } else {
            ""
        };
        return Err(AuditError::NoPolicy(where_.to_string()));
    }
    let mut report = audit(&client, &policies, args.namespace.as_deref()).await?;
    report.warnings = warnings;
    Ok(report)
}

/// `knative-ha-webhook audit`.
pub fn run_cli(args: AuditArgs) -> ExitCode {
    crate::tls::install_crypto_provider();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(&args)) {
        Ok(report) => {
            let text = match args.output {
                AuditFormat::Table => render_table(&report),
                AuditFormat::Json => match serde_json::to_string_pretty(&report) {
                    Ok(s) => s + "\n",
                    Err(e) => {
                        eprintln!("error: encoding the report: {e}");
                        return ExitCode::from(2);
                    }
                },
                AuditFormat::Yaml => match crate::preview::to_yaml(&report) {
                    Ok(s) => s,
                    Err(e) => {
                        eprintln!("error: encoding the report: {e:#}");
                        return ExitCode::from(2);
                    }
                },
            };
            print!("{text}");
            ExitCode::from(exit_code(&report))
        }
        Err(e) => {
            eprintln!("error: audit: {e}");
            ExitCode::from(2)
        }
    }
}
