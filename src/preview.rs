//! Offline commands: `preview`, `check` and `crd`.
//!
//! `preview` runs the engine over manifests exactly as the admission server
//! would (operation CREATE, namespace from `metadata.namespace`, `default`
//! when absent; HPA targets taken from the HPAs in the input).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

use crate::engine::{self, Context, Input, Kind, Operation};
use crate::policy::{self, Policy};

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

pub use crate::check::{CheckArgs, run_check};
pub use crate::manifest::Document;

/// Parses multi-document YAML into Kubernetes objects (lists expanded).
/// Errors name the file, the 1-based document index and the file line.
pub fn parse_manifests(file: &str, text: &str) -> anyhow::Result<Vec<Document>> {
    // The message already carries the cause: no source chain to repeat it.
    crate::manifest::parse_manifests(file, text).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Loads policies from files (each may hold several documents). Two
/// policies for the same namespace are an error.
pub fn load_policies(paths: &[PathBuf]) -> anyhow::Result<BTreeMap<String, Policy>> {
    let mut by_ns: BTreeMap<String, (String, Policy)> = BTreeMap::new();
    for path in paths {
        let (name, text) = crate::manifest::read_input(path)?;
        let policies = policy::parse_policies(&text).map_err(|e| {
            let lines: Vec<String> = e.flatten().iter().map(|e| format!("{name}: {e}")).collect();
            anyhow::anyhow!("invalid policy:\n{}", lines.join("\n"))
        })?;
        for p in policies {
            if let Some((other_file, other)) = by_ns.get(&p.spec.target_namespace) {
                bail!(
                    "{name}: policy {:?} targets namespace {:?}, already governed by policy {:?} from {other_file}; one policy per namespace",
                    p.name,
                    p.spec.target_namespace,
                    other.name
                );
            }
            by_ns.insert(p.spec.target_namespace.clone(), (name.clone(), p));
        }
    }
    Ok(by_ns.into_iter().map(|(ns, (_, p))| (ns, p)).collect())
}

fn namespace_of(value: &Value) -> &str {
    value
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
}

/// Deployments targeted by the HPAs in the input, per namespace.
pub fn hpa_targets(docs: &[Document]) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for d in docs {
        if Kind::of(&d.value) != Some(Kind::HorizontalPodAutoscaler) {
            continue;
        }
        let target = d.value.pointer("/spec/scaleTargetRef");
        let kind = target.and_then(|t| t.get("kind")).and_then(Value::as_str);
        let name = target.and_then(|t| t.get("name")).and_then(Value::as_str);
        if let (Some("Deployment"), Some(name)) = (kind, name) {
            out.entry(namespace_of(&d.value).to_string())
                .or_default()
                .insert(name.to_string());
        }
    }
    out
}

/// One previewed document: the (possibly mutated) object and its mutation.
pub struct Previewed {
    pub doc: Document,
    pub object: Value,
    pub mutation: engine::Mutation,
}

/// Runs the engine over every document.
pub fn preview_documents(
    policies: &BTreeMap<String, Policy>,
    docs: Vec<Document>,
) -> anyhow::Result<Vec<Previewed>> {
    let targets = hpa_targets(&docs);
    let mut out = Vec::with_capacity(docs.len());
    for doc in docs {
        let namespace = namespace_of(&doc.value).to_string();
        let (object, mutation) = match policies.get(&namespace) {
            None => (None, engine::Mutation::default()),
            Some(policy) => {
                let ctx = Context {
                    hpa_targets: targets.get(&namespace).cloned().unwrap_or_default(),
                };
                let input = Input {
                    operation: Operation::Create,
                    namespace: &namespace,
                    object: &doc.value,
                };
                let outcome = engine::mutate_object(policy, &input, &ctx)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", doc.display()))?;
                (outcome.object, outcome.mutation)
            }
        };
        let object = object.unwrap_or_else(|| doc.value.clone());
        out.push(Previewed {
            doc,
            object,
            mutation,
        });
    }
    Ok(out)
}

/// Renders one value as YAML the way a person writes it: long single-line
/// strings (image digests) stay plain scalars; multi-line strings use `|`.
pub fn to_yaml<T: serde::Serialize>(value: &T) -> anyhow::Result<String> {
    let mut options = serde_saphyr::SerializerOptions::default();
    options.folded_wrap_chars = usize::MAX / 2;
    serde_saphyr::to_string_with_options(value, options).context("cannot render YAML")
}

/// Renders documents as multi-document YAML (`---` between documents).
pub fn to_multi_yaml<'a>(values: impl IntoIterator<Item = &'a Value>) -> anyhow::Result<String> {
    let mut out = String::new();
    for (i, v) in values.into_iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        let text = to_yaml(v)?;
        out.push_str(&text);
        if !text.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

/// The `--output patches` line of a changed document.
pub fn patch_line(p: &Previewed) -> Value {
    let v = &p.doc.value;
    json!({
        "apiVersion": v.get("apiVersion"),
        "kind": v.get("kind"),
        "namespace": namespace_of(v),
        "name": v.pointer("/metadata/name"),
        "patch": p.mutation.patch,
        "changes": p.mutation.changes,
    })
}

pub fn run_preview(args: &PreviewArgs) -> anyhow::Result<ExitCode> {
    let policies = load_policies(&args.policy)?;
    let inputs: Vec<PathBuf> = if args.manifests.is_empty() {
        vec![PathBuf::from("-")]
    } else {
        args.manifests.clone()
    };
    let mut docs = Vec::new();
    for path in &inputs {
        let (name, text) = crate::manifest::read_input(path)?;
        docs.extend(parse_manifests(&name, &text)?);
    }
    let previewed = preview_documents(&policies, docs)?;
    let mut stdout = std::io::stdout().lock();
    match args.output {
        OutputFormat::Yaml => {
            let text = to_multi_yaml(previewed.iter().map(|p| &p.object))?;
            stdout.write_all(text.as_bytes())?;
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
            writeln!(stdout, "{}", serde_json::to_string_pretty(&value)?)?;
        }
        OutputFormat::Patches => {
            for p in previewed.iter().filter(|p| !p.mutation.is_empty()) {
                writeln!(stdout, "{}", serde_json::to_string(&patch_line(p))?)?;
            }
        }
    }
    stdout.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The CRD as YAML, deterministic (the Helm chart copies it byte for byte).
pub fn crd_yaml() -> anyhow::Result<String> {
    to_yaml(&policy::crd_value())
}

pub fn run_crd(args: &CrdArgs) -> anyhow::Result<ExitCode> {
    let text = match args.output {
        CrdFormat::Yaml => crd_yaml()?,
        CrdFormat::Json => serde_json::to_string_pretty(&policy::crd_value())? + "\n",
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(ExitCode::SUCCESS)
}
