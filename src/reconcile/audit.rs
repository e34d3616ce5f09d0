//! `knative-ha-webhook audit`: what differs, per governed object, between
//! the cluster and the policy. Exit code 0 when everything is in line, 1
//! when drift exists, 2 on errors.
//!
//! Policies come from `--policy-file` files, else from the cluster with a
//! one-shot list of HighAvailabilityPolicy resources and labelled policy
//! ConfigMaps, merged with the cluster source's rules
//! ([`crate::sources::cluster::merge`]).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DynamicObject, ListParams};
use serde::Serialize;

use super::error::{self, ReconcileError};
use super::objects;
use super::plan::{self, ChangeLine};
use crate::engine::Kind;
use crate::policy::Policy;
use crate::sources::cluster::{configmaps, merge, policies};

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

/// The policies in force in the cluster (one-shot list, cluster rules).
pub async fn cluster_policies(
    client: &kube::Client,
    webhook_namespace: Option<&str>,
) -> Result<(Vec<(Arc<Policy>, String)>, Vec<String>)> {
    let resource = policies::api_resource();
    let crs: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let cr_list = match crs.list(&ListParams::default()).await {
        Ok(l) => l.items,
        // The CRD not being installed: ConfigMaps alone.
        Err(e) if error::is_not_found(&e) => Vec::new(),
        Err(source) => {
            return Err(AuditError::List {
                what: "HighAvailabilityPolicy resources",
                source,
            });
        }
    };
    let cms: Api<ConfigMap> = match webhook_namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let cm_list = cms
        .list(&ListParams::default().labels(configmaps::LABEL_SELECTOR))
        .await
        .map_err(|source| AuditError::List {
            what: "policy ConfigMaps",
            source,
        })?
        .items;
    let observed = cr_list
        .iter()
        .map(policies::observe)
        .chain(cm_list.iter().map(configmaps::observe));
    let mut objects = Vec::new();
    for o in observed {
        let mut object = o.object;
        match o.parsed {
            Ok(p) => object.last_valid = Some(Arc::new(p)),
            Err(e) => object.error = Some(e),
        }
        objects.push(object);
    }
    let merged = merge::merge(&objects);
    let mut warnings = Vec::new();
    for obj in &objects {
        match merged.verdicts.get(&(obj.origin, obj.uid.clone())) {
            Some(merge::Verdict::Invalid { message, .. }) => {
                warnings.push(format!("{}: invalid, not applied: {message}", display(obj)))
            }
            Some(merge::Verdict::Conflict { namespace, winner }) => warnings.push(format!(
                "{}: in conflict with {winner} for namespace {namespace}, not applied",
                display(obj)
            )),
            _ => {}
        }
    }
    let in_force = merged
        .policies
        .iter()
        .map(|(ns, p)| {
            let source = merged
                .winners
                .get(ns)
                .map(|(_, w)| w.clone())
                .unwrap_or_default();
            (p.clone(), source)
        })
        .collect();
    Ok((in_force, warnings))
}

/// A failed list in the user's words: the API server's own message and
/// code, or why it could not be reached ("connection refused", "timed out").
fn list_reason(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} (HTTP {})", s.message, s.code),
        other => crate::kubeclient::reason(other),
    }
}

fn display(obj: &merge::PolicyObject) -> String {
    match &obj.namespace {
        Some(ns) => format!("{}/{ns}/{}", obj.origin.kind(), obj.name),
        None => obj.display(),
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

/// The change without its `kind/name: ` prefix (the table has columns).
fn short<'a>(change: &'a str, kind: &str, name: &str) -> &'a str {
    let prefix = format!("{}/{name}: ", kind.to_lowercase());
    change.strip_prefix(&prefix).unwrap_or(change)
}

/// The table: one row per change, then a summary line.
pub fn render_table(report: &AuditReport) -> String {
    let mut rows: Vec<[String; 4]> = vec![[
        "NAMESPACE".into(),
        "KIND".into(),
        "NAME".into(),
        "CHANGE".into(),
    ]];
    for d in &report.drift {
        for c in &d.changes {
            let mut text = short(&c.change, d.kind, &d.name).to_string();
            if c.rolls_pods {
                text.push_str(" (rolls pods)");
            }
            rows.push([
                d.namespace.clone(),
                d.kind.to_string(),
                d.name.clone(),
                text,
            ]);
        }
    }
    let mut out = String::new();
    for p in &report.policies {
        out.push_str(&format!(
            "namespace {}: policy {} ({})\n",
            p.namespace, p.policy, p.source
        ));
    }
    for w in &report.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    if report.drift.is_empty() {
        out.push_str(&format!(
            "in line: all {} governed objects match their policy\n",
            report.objects
        ));
        return out;
    }
    let widths: Vec<usize> = (0..3)
        .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
        .collect();
    for r in &rows {
        out.push_str(&format!(
            "{:w0$}  {:w1$}  {:w2$}  {}\n",
            r[0],
            r[1],
            r[2],
            r[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2]
        ));
    }
    let rolling = report
        .drift
        .iter()
        .filter(|d| d.changes.iter().any(|c| c.rolls_pods))
        .count();
    out.push_str(&format!(
        "drift: {} of {} governed objects differ from their policy ({} would roll pods)\n",
        report.drift.len(),
        report.objects,
        rolling
    ));
    out
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

/// The exit code for a report: 0 in line, 1 drift.
pub fn exit_code(report: &AuditReport) -> u8 {
    if report.in_line { 0 } else { 1 }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn report(drift: Vec<ObjectDrift>) -> AuditReport {
        AuditReport {
            in_line: drift.is_empty(),
            policies: vec![PolicyRef {
                namespace: "knative-serving".into(),
                policy: "serving".into(),
                source: "file".into(),
            }],
            objects: 3,
            drift,
            warnings: Vec::new(),
        }
    }

    #[test]
    fn table_strips_the_prefix_and_marks_pod_template_changes() {
        let r = report(vec![ObjectDrift {
            kind: "Deployment",
            namespace: "knative-serving".into(),
            name: "controller".into(),
            changes: vec![
                ChangeLine {
                    change: "deployment/controller: spec.replicas 1 -> 3 (policy serving)".into(),
                    rolls_pods: false,
                },
                ChangeLine {
                    change: "deployment/controller: pod anti-affinity set to Required on kubernetes.io/hostname (policy serving)".into(),
                    rolls_pods: true,
                },
            ],
        }]);
        let t = render_table(&r);
        assert!(
            t.contains(
                "knative-serving  Deployment  controller  spec.replicas 1 -> 3 (policy serving)\n"
            ),
            "{t}"
        );
        assert!(t.contains("(policy serving) (rolls pods)\n"), "{t}");
        assert!(
            t.contains(
                "drift: 1 of 3 governed objects differ from their policy (1 would roll pods)"
            ),
            "{t}"
        );
        assert_eq!(exit_code(&r), 1);
    }

    #[test]
    fn in_line_report_says_so_and_exits_zero() {
        let r = report(Vec::new());
        let t = render_table(&r);
        assert!(
            t.contains("in line: all 3 governed objects match their policy"),
            "{t}"
        );
        assert!(!t.contains("NAMESPACE"), "{t}");
        assert_eq!(exit_code(&r), 0);
    }
}
