//! `knative-ha-webhook preview`.

use std::io::Write;
use std::process::ExitCode;

use serde_json::{Value, json};

use crate::config::{OutputFormat, PreviewArgs};
use crate::tools::preview::{
    Previewed, load_policies, name_warnings, patch_line, preview_documents, read_manifests,
};

/// Runs the engine over the manifests and prints what comes out.
pub fn preview(args: &PreviewArgs) -> anyhow::Result<ExitCode> {
    let policies = load_policies(&args.policy)?;
    let mut docs = read_manifests(&args.manifests)?;
    if let Some((kind, name)) = &args.operator_owner {
        for doc in &mut docs {
            owned_by_operator(&mut doc.value, kind, name);
        }
    }
    for warning in name_warnings(&policies, &docs) {
        eprintln!("warning: {warning}");
    }
    let previewed = preview_documents(&policies, docs)?;
    // What the server returns as admission warnings, whatever the format.
    let warnings = previewed
        .iter()
        .flat_map(|p| &p.mutation.changes)
        .filter(|c| c.is_warning());
    let mut stderr = std::io::stderr().lock();
    for w in warnings {
        writeln!(stderr, "{w}")?;
    }
    super::write_stdout(&render(&previewed, args.output)?)?;
    Ok(ExitCode::SUCCESS)
}

/// Gives `object` an ownerReference to the Knative Operator's `kind/name`,
/// as the Operator's objects carry, unless it has owners of its own.
fn owned_by_operator(object: &mut Value, kind: &str, name: &str) {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut)
        && metadata.get("ownerReferences").is_none_or(Value::is_null)
    {
        metadata.insert(
            "ownerReferences".into(),
            json!([{
                "apiVersion": crate::knative_operator::API_VERSION,
                "kind": kind,
                "name": name,
                "uid": "",
                "controller": true,
                "blockOwnerDeletion": true,
            }]),
        );
    }
}

/// The output in `format`.
fn render(previewed: &[Previewed], format: OutputFormat) -> anyhow::Result<String> {
    Ok(match format {
        OutputFormat::Yaml => {
            crate::tools::preview::to_multi_yaml(previewed.iter().map(|p| &p.object))?
        }
        OutputFormat::Json => {
            let objects: Vec<&Value> = previewed.iter().map(|p| &p.object).collect();
            let value = match objects.as_slice() {
                [one] => (*one).clone(),
                all => json!({
                    "apiVersion": "v1",
                    "kind": "List",
                    "metadata": {"resourceVersion": ""},
                    "items": all,
                }),
            };
            serde_json::to_string_pretty(&value)? + "\n"
        }
        OutputFormat::Patches => {
            let mut out = String::new();
            // Changed documents, and those with warnings only (empty patch).
            let shown = |p: &&Previewed| !p.mutation.is_empty() || !p.mutation.changes.is_empty();
            for p in previewed.iter().filter(shown) {
                out.push_str(&serde_json::to_string(&patch_line(p))?);
                out.push('\n');
            }
            out
        }
    })
}
