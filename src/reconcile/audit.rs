//! `knative-ha-webhook audit` (run by `cmd::audit`; docs/reconcile.md):
//! what differs, per governed object, between the cluster and the policy
//! (from `--policy-file`, else [`cluster_policies`]). The table and the exit
//! code: [`crate::tools::audit_table`].

use std::sync::Arc;

use serde::Serialize;

use super::error::ReconcileError;
use super::objects;
use super::plan::{self, ChangeLine};
use crate::engine::Kind;
use crate::policy::Policy;

mod cluster;

pub use cluster::cluster_policies;

/// Errors of `audit` (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error(transparent)]
    Kube(#[from] crate::kubeclient::KubeClientError),
    #[error("{0}")]
    Policy(String),
    /// A list failed; the API server's message or why it could not be
    /// reached ([`crate::kubeclient::describe`]).
    #[error("listing {what}")]
    List {
        what: &'static str,
        #[source]
        reason: crate::errors::InWords,
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
    /// Targets their policy leaves unchanged, and why.
    pub left_alone: Vec<ObjectLeftAlone>,
    /// Namespaces whose policy changes nothing it targets (every target
    /// left alone): not in line, whatever the drift.
    pub governs_nothing: Vec<String>,
    /// The Knative Operator's fields the policies override.
    pub operator_overrides: Vec<String>,
    /// What the policies ask for that is held back (a PriorityClass that
    /// does not exist): not in line.
    pub held_back: Vec<String>,
}

/// One target its policy leaves unchanged.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectLeftAlone {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
    pub reason: String,
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
        let mut known = listed.known(ns, Some(policy), None);
        known.priority_classes = objects::priority_classes(client, Some(policy)).await;
        let exists = |class: &str| {
            known
                .priority_classes
                .as_ref()
                .is_none_or(|c| c.contains(class))
        };
        for (path, class) in policy.spec.priority_classes().filter(|(_, c)| !exists(c)) {
            report.held_back.push(format!(
                "policy {} ({ns}): {path} {class:?} is held back: no PriorityClass {class} exists in the cluster (pods naming it would be refused)",
                policy.name
            ));
        }
        report.objects += listed.objects.len();
        for object in &listed.objects {
            let drift = plan::plan(&known, ns, object, true)
                .map_err(|error| ReconcileError::Engine(Box::new(error)))?;
            report.drift.extend(drift.map(|d| ObjectDrift {
                kind: d.kind.as_str(),
                namespace: d.namespace,
                name: d.name,
                changes: d.changes,
            }));
        }
        let operator = super::coverage::list_operator(client, ns).await;
        let coverage = super::coverage::coverage(&known, ns, &listed, &operator);
        if coverage.governs_nothing() {
            report.governs_nothing.push(ns.clone());
        }
        report
            .left_alone
            .extend(coverage.left_alone.iter().map(|u| ObjectLeftAlone {
                kind: u.kind,
                namespace: ns.clone(),
                name: u.name.clone(),
                reason: u.why.to_string(),
            }));
        report
            .operator_overrides
            .extend(coverage.overrides.iter().map(ToString::to_string));
        for change in crate::engine::budgets::plan(&known, ns, &listed.objects) {
            report.drift.push(ObjectDrift {
                kind: Kind::PodDisruptionBudget.as_str(),
                namespace: ns.clone(),
                name: change.name,
                changes: vec![ChangeLine {
                    change: change.change,
                    rolls_pods: false,
                }],
            });
        }
    }
    report.in_line =
        report.drift.is_empty() && report.governs_nothing.is_empty() && report.held_back.is_empty();
    Ok(report)
}
