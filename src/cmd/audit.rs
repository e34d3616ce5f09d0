//! `knative-ha-webhook audit`: exit 0 in line, 1 drift, 2 on errors.

use std::process::ExitCode;
use std::sync::Arc;

use crate::config::{AuditConfig, AuditFormat};
use crate::errors::Chain;
use crate::reconcile::audit::{AuditError, AuditReport, audit as audit_cluster, cluster_policies};
use crate::tools::audit_table::{exit_code, render_table};

/// Audits and prints the report; errors are printed here (exit code 2).
pub fn audit(config: &AuditConfig) -> anyhow::Result<ExitCode> {
    crate::tls::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let report = match runtime {
        Ok(runtime) => runtime
            .block_on(run(config))
            .map_err(|e| format!("audit: {}", Chain(&e))),
        Err(e) => Err(format!("starting the runtime: {e}")),
    };
    let text = report.and_then(|report| Ok((render(&report, config.output)?, report)));
    match text {
        Ok((text, report)) => {
            print!("{text}");
            Ok(ExitCode::from(exit_code(&report)))
        }
        Err(message) => {
            eprintln!("error: {message}");
            Ok(ExitCode::from(2))
        }
    }
}

/// The report in `format`.
fn render(report: &AuditReport, format: AuditFormat) -> Result<String, String> {
    match format {
        AuditFormat::Table => Ok(render_table(report)),
        AuditFormat::Json => serde_json::to_string_pretty(report)
            .map(|s| s + "\n")
            .map_err(|e| format!("encoding the report: {e}")),
        AuditFormat::Yaml => crate::tools::preview::to_yaml(report)
            .map_err(|e| format!("encoding the report: {e:#}")),
    }
}

/// Loads the policies (files or cluster) and audits.
async fn run(config: &AuditConfig) -> Result<AuditReport, AuditError> {
    let file_policies = if config.policy.is_empty() {
        None
    } else {
        let by_ns = crate::tools::preview::load_policies(&config.policy)
            .map_err(|e| AuditError::Policy(format!("{e:#}")))?;
        Some(
            by_ns
                .into_values()
                .map(|p| (Arc::new(p), "file".to_string()))
                .collect::<Vec<_>>(),
        )
    };
    let client = crate::kubeclient::connect(&config.kube).await?.client;
    let (policies, warnings) = match file_policies {
        Some(p) => (p, Vec::new()),
        None => cluster_policies(&client, config.webhook_namespace.as_deref()).await?,
    };
    if policies.is_empty() {
        let where_ = if config.policy.is_empty() {
            " in the cluster (HighAvailabilityPolicy resources or ConfigMaps labelled knativeha.dev/policy=true)"
        } else {
            ""
        };
        return Err(AuditError::NoPolicy(where_.to_string()));
    }
    let mut report = audit_cluster(&client, &policies, config.namespace.as_deref()).await?;
    report.warnings = warnings;
    Ok(report)
}
