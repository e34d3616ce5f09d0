//! `knative-ha-webhook audit`: exit 0 in line, 1 drift (or a policy that governs nothing), 2 on errors.

use std::process::ExitCode;
use std::sync::Arc;

use super::report;
use crate::config::AuditArgs;
use crate::kubeclient::KubeSettings;
use crate::reconcile::audit::{AuditError, AuditReport, audit as audit_cluster, cluster_policies};
use crate::tools::audit_table::{exit_code, render_table};

/// Audits and prints the report; errors are printed here (exit code 2).
pub fn audit(args: &AuditArgs, kube: &KubeSettings) -> ExitCode {
    let work = run(args, kube);
    report::run("audit", work, args.output, render_table, exit_code)
}

async fn run(args: &AuditArgs, kube: &KubeSettings) -> Result<AuditReport, AuditError> {
    let in_cluster = args.policy.is_empty();
    let mut policies = Vec::new();
    if !in_cluster {
        let by_ns = crate::tools::preview::load_policies(&args.policy)
            .map_err(|e| AuditError::Policy(format!("{e:#}")))?;
        policies.extend(
            by_ns
                .into_values()
                .map(|p| (Arc::new(p), "file".to_string())),
        );
    }
    let client = crate::kubeclient::connect(kube).await?;
    let mut warnings = Vec::new();
    if in_cluster {
        (policies, warnings) = cluster_policies(&client, args.webhook_namespace.as_deref()).await?;
    }
    if policies.is_empty() {
        let where_ = if in_cluster {
            " in the cluster (HighAvailabilityPolicy resources or ConfigMaps labelled knativeha.dev/policy=true)"
        } else {
            ""
        };
        return Err(AuditError::NoPolicy(where_.to_string()));
    }
    let mut report = audit_cluster(&client, &policies, args.namespace.as_deref()).await?;
    report.warnings = warnings;
    Ok(report)
}
