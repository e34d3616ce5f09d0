//! `knative-ha-webhook restore`: the cluster form (one namespace, exit 0
//! done, 1 a dry run with something to restore, 2 on errors, like `audit`)
//! and the offline form (manifests in, restored manifests out).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use super::report;
use crate::config::{AuditFormat, RestoreConfig};
use crate::kubeclient::KubeSettings;
use crate::reconcile::restore::{RestoreError, RestoreReport, restore_namespace};
use crate::tools::preview::{namespace_of, parse_manifests, to_multi_yaml};

/// Runs the configured form of `restore`.
pub fn restore(config: &RestoreConfig) -> anyhow::Result<ExitCode> {
    match config {
        RestoreConfig::Offline { manifests } => offline(manifests),
        RestoreConfig::Cluster {
            namespace,
            dry_run,
            output,
            kube,
        } => Ok(cluster(namespace, *dry_run, *output, kube)),
    }
}

/// Restores one namespace and prints the report; errors are printed here
/// (exit code 2).
fn cluster(namespace: &str, dry_run: bool, output: AuditFormat, kube: &KubeSettings) -> ExitCode {
    let rendered = report::block_on("restore", run(namespace, dry_run, kube)).and_then(|r| {
        let text = report::render(&r, output, RestoreReport::render)?;
        Ok((text, r.exit_code()))
    });
    report::print(rendered)
}

async fn run(
    namespace: &str,
    dry_run: bool,
    kube: &KubeSettings,
) -> Result<RestoreReport, RestoreError> {
    let client = crate::kubeclient::connect(kube).await?.client;
    restore_namespace(&client, namespace, dry_run).await
}

fn offline(manifests: &[PathBuf]) -> anyhow::Result<ExitCode> {
    let inputs: Vec<PathBuf> = if manifests.is_empty() {
        vec![PathBuf::from("-")]
    } else {
        manifests.to_vec()
    };
    let mut objects = Vec::new();
    let mut changes = Vec::new();
    for path in &inputs {
        let (name, text) = crate::manifest::read_input(path)?;
        for doc in parse_manifests(&name, &text)? {
            if let Some(deployment) = crate::engine::created::created_for(&doc.value) {
                // Created by the reconciler (or `preview`): not the release's.
                changes.push(format!(
                    "poddisruptionbudget/{}: left out, created for deployment/{deployment} by knative-ha-webhook",
                    doc.value["metadata"]["name"].as_str().unwrap_or_default()
                ));
                continue;
            }
            let input = crate::engine::Input::update(namespace_of(&doc.value), &doc.value);
            let outcome = crate::engine::outcome(crate::engine::Answering::Restore, &input)
                .map_err(|e| anyhow::anyhow!("{}: {e}", doc.display()))?;
            changes.extend(outcome.mutation.lines());
            objects.push(outcome.object.unwrap_or(doc.value));
        }
    }
    let text = to_multi_yaml(objects.iter())?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    let mut stderr = std::io::stderr().lock();
    for c in &changes {
        writeln!(stderr, "{c}")?;
    }
    Ok(ExitCode::SUCCESS)
}
