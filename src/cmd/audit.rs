//! `knative-ha-webhook audit`: exit 0 in line, 1 drift (or a policy that governs nothing), 2 on errors.

use std::process::ExitCode;
use std::sync::Arc;

use super::report;
use crate::config::AuditConfig;
use crate::reconcile::audit::{AuditError, AuditReport, audit as audit_cluster, cluster_policies};
use crate::tools::audit_table::{exit_code, render_table};

/// Audits and prints the report; errors are printed here (exit code 2).
pub fn audit(config: &AuditConfig) -> anyhow::Result<ExitCode> {
    let rendered = report::block_on("audit", run(config)).and_then(|report| {
        let text = report::render(&report, config.output, render_table)?;
        Ok((text, exit_code(&report)))
    });
    Ok(report::print(rendered))
}

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
