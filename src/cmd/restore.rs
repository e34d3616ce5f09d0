//! `knative-ha-webhook restore`: the cluster form (one namespace, exit 0
//! done, 1 a dry run with something to restore, 2 on errors, like `audit`)
//! and the offline form (manifests in, restored manifests out).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use super::report;
use crate::config::RestoreArgs;
use crate::kubeclient::KubeSettings;
use crate::reconcile::restore::{RestoreReport, restore_namespace};
use crate::tools::preview::{namespace_of, read_manifests, to_multi_yaml};

/// Restores one namespace of the cluster (`--namespace`) and prints the
/// report, errors too (exit code 2); without it, the manifests offline.
pub fn restore(args: &RestoreArgs, kube: &KubeSettings) -> anyhow::Result<ExitCode> {
    let Some(namespace) = &args.namespace else {
        return offline(&args.manifests);
    };
    let work = async {
        let client = crate::kubeclient::connect(kube).await?;
        restore_namespace(&client, namespace, args.dry_run).await
    };
    let (table, code) = (RestoreReport::render, RestoreReport::exit_code);
    Ok(report::run("restore", work, args.output, table, code))
}

fn offline(manifests: &[PathBuf]) -> anyhow::Result<ExitCode> {
    let mut objects = Vec::new();
    let mut changes = Vec::new();
    for doc in read_manifests(manifests)? {
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
    super::write_stdout(&to_multi_yaml(objects.iter())?)?;
    let mut stderr = std::io::stderr().lock();
    for c in &changes {
        writeln!(stderr, "{c}")?;
    }
    Ok(ExitCode::SUCCESS)
}
