//! What the offline commands `preview` and `crd` compute. `preview` runs the engine over manifests exactly as the admission server
//! would (operation CREATE, namespace from `metadata.namespace`, `default`
//! when absent; HPA targets taken from the HPAs in the input, the
//! `config-leader-election` data from the ConfigMap in the input).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use serde_json::{Map, Value, json};

use crate::engine::{self, Answering, Input, Kind, Operation, Snapshot};
use crate::policy::{self, Policy};

pub use crate::manifest::{Document, parse_manifests};

/// The objects of the manifest files (standard input when none, or for
/// `-`), in order.
pub fn read_manifests(paths: &[PathBuf]) -> anyhow::Result<Vec<Document>> {
    let stdin = [PathBuf::from("-")];
    let mut docs = Vec::new();
    for path in if paths.is_empty() { &stdin[..] } else { paths } {
        let (name, text) = crate::manifest::read_input(path)?;
        docs.extend(parse_manifests(&name, &text)?);
    }
    Ok(docs)
}

/// Loads policies from files (each may hold several documents). Two
/// policies for the same namespace are an error.
pub fn load_policies(paths: &[PathBuf]) -> anyhow::Result<BTreeMap<String, Policy>> {
    let (mut by_ns, mut claims) = (BTreeMap::new(), policy::Claims::default());
    for path in paths {
        let (name, text) = crate::manifest::read_input(path)?;
        let policies = policy::parse_policies(&text).map_err(|e| {
            let lines: Vec<String> = e.flatten().iter().map(|e| format!("{name}: {e}")).collect();
            anyhow::anyhow!("invalid policy:\n{}", lines.join("\n"))
        })?;
        for p in policies {
            if let Err(e) = claims.claim(&p, &name) {
                bail!("{name}: policy {:?}: spec.targetNamespace: {e}", p.name);
            }
            by_ns.insert(p.spec.target_namespace.clone(), p);
        }
    }
    Ok(by_ns)
}

/// `metadata.namespace`, `default` when absent or empty.
pub fn namespace_of(value: &Value) -> &str {
    value
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .unwrap_or("default")
}

/// Deployments targeted by the HPAs in the input, per namespace. A
/// namespace whose input holds HPAs is taken as listed whole
/// ([`engine::HPAS_LISTED`]): an HPA-backed Deployment beside them without
/// one of its own has none for the policy to raise (a release's manifest
/// holds all of its HPAs), so its budget is judged at the 1 it runs.
pub fn hpa_targets(docs: &[Document]) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for d in docs {
        let at = |pointer| d.value.pointer(pointer).and_then(Value::as_str);
        if Kind::of(&d.value) == Some(Kind::HorizontalPodAutoscaler)
            && at("/spec/scaleTargetRef/kind") == Some("Deployment")
            && let Some(name) = at("/spec/scaleTargetRef/name")
        {
            let skipped = engine::carries_skip_label(&d.value);
            let targets = out.entry(namespace_of(&d.value).to_string()).or_default();
            targets.insert(engine::hpa_target_entry(name, skipped));
            targets.insert(engine::HPAS_LISTED.to_string());
        }
    }
    out
}

/// The duration keys of each namespace's `config-leader-election` in the
/// input ([`engine::Facts::leader_election`]).
pub fn leader_election_data(docs: &[Document]) -> BTreeMap<String, Map<String, Value>> {
    docs.iter()
        .filter(|d| Kind::of(&d.value) == Some(Kind::ConfigMap))
        .filter(|d| {
            d.value.pointer("/metadata/name").and_then(Value::as_str)
                == Some(engine::LEADER_ELECTION_CONFIGMAP)
        })
        .map(|d| {
            let data = engine::configmap::context_data(&d.value);
            (namespace_of(&d.value).to_string(), data)
        })
        .collect()
}

/// Workload and exclude names of each policy that match no Deployment of
/// its namespace in `docs` and no Knative Deployment, one line each.
pub fn name_warnings(policies: &BTreeMap<String, Policy>, docs: &[Document]) -> Vec<String> {
    let mut out = Vec::new();
    for (ns, policy) in policies {
        let mut known = policy::names::knative_deployments();
        known.extend(
            docs.iter()
                .filter(|d| Kind::of(&d.value) == Some(Kind::Deployment))
                .filter(|d| namespace_of(&d.value) == ns)
                .filter_map(|d| d.value.pointer("/metadata/name").and_then(Value::as_str))
                .map(str::to_string),
        );
        for m in policy::names::misplaced(&policy.spec) {
            out.push(format!("policy {}: {}", policy.name, m.message(ns)));
        }
        for u in policy::names::unmatched(&policy.spec, &known) {
            let hint = u
                .suggestion
                .map(|s| format!(" (did you mean {s:?}?)"))
                .unwrap_or_default();
            out.push(format!(
                "policy {}: {}: {:?} matches no Deployment in namespace {ns} of the manifests and is not the name of a Knative Deployment{hint}",
                policy.name, u.path, u.name
            ));
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
    // Offline: the PriorityClasses are not known, a name is written unchecked.
    let snapshot = Snapshot {
        hpa_targets: hpa_targets(&docs),
        leader_election: leader_election_data(&docs),
        ..Snapshot::from_policies(policies.values().cloned())
    };
    let created = created_budgets(&snapshot, &docs);
    let mut out = Vec::with_capacity(docs.len() + created.len());
    for doc in docs {
        let input = Input {
            operation: Operation::Create,
            namespace: namespace_of(&doc.value),
            object: &doc.value,
        };
        let outcome = engine::outcome(Answering::Governed(&snapshot), &input)
            .map_err(|e| anyhow::anyhow!("{}: {e}", doc.display()))?;
        out.push(Previewed {
            object: outcome.object.unwrap_or_else(|| doc.value.clone()),
            mutation: outcome.mutation,
            doc,
        });
    }
    out.extend(created);
    Ok(out)
}

/// The PodDisruptionBudgets the reconciler would create for governed
/// Deployments of the manifests that no PDB of the manifests covers
/// ([`engine::budgets`]), after the documents, each with its change line.
fn created_budgets(snapshot: &Snapshot, docs: &[Document]) -> Vec<Previewed> {
    let mut out = Vec::new();
    for namespace in snapshot.policies.keys() {
        let objects: Vec<Value> = docs
            .iter()
            .filter(|d| namespace_of(&d.value) == namespace)
            .map(|d| d.value.clone())
            .collect();
        for change in engine::budgets::plan(snapshot, namespace, &objects) {
            let engine::budgets::Action::Create(pdb) = change.action else {
                continue;
            };
            out.push(Previewed {
                doc: Document {
                    file: "(created by the reconciler)".to_string(),
                    index: out.len() + 1,
                    item: None,
                    value: pdb.clone(),
                },
                mutation: engine::Mutation {
                    // The whole object, added at the root (RFC 6902 `add` of "").
                    patch: json_patch::Patch(vec![json_patch::PatchOperation::Add(
                        json_patch::AddOperation {
                            path: json_patch::jsonptr::PointerBuf::new(),
                            value: pdb.clone(),
                        },
                    )]),
                    changes: vec![change.change],
                },
                object: pdb,
            });
        }
    }
    out
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
    let mut docs = Vec::new();
    for v in values {
        let text = to_yaml(v)?;
        docs.push(if text.ends_with('\n') {
            text
        } else {
            text + "\n"
        });
    }
    Ok(docs.join("---\n"))
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

/// The CRD as YAML, deterministic (the Helm chart copies it byte for byte).
pub fn crd_yaml() -> anyhow::Result<String> {
    to_yaml(&policy::crd_value())
}
