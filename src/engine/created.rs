//! The marks of a PodDisruptionBudget the reconciler created
//! ([`super::budgets`]), and how a release's apply over one shows.

use serde_json::{Map, Value};

use super::records::ANNOTATIONS;

/// The budget fields of a PDB's `spec`.
const FIELDS: [&str; 2] = ["minAvailable", "maxUnavailable"];
pub(crate) const SPEC: &[&str] = &["spec"];

/// The annotation that marks a PDB this tool created, naming its Deployment.
pub const CREATED_FOR: &str = "knativeha.dev/created-for";
/// The label every created PDB carries.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "knative-ha-webhook");

/// The annotation kubectl's client-side apply records what it applied in;
/// a created PDB never carries it.
pub(crate) const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

const LABELS: &[&str] = &["metadata", "labels"];

/// The Deployment a PDB was created for (None for every other object): it
/// carries all of the marks (the annotation naming the Deployment, the
/// managed-by label, the name `<deployment>-pdb`) and is never a budget
/// Knative ships (`activator-pdb` with the annotation added by hand is not
/// ours to delete): the reconciler deletes what this says it created.
pub fn created_for(object: &Value) -> Option<&str> {
    let deployment = super::lookup(object, ANNOTATIONS)?
        .get(CREATED_FOR)?
        .as_str()?;
    let labelled = super::lookup(object, LABELS)
        .and_then(|l| l.get(MANAGED_BY.0))
        .and_then(Value::as_str)
        == Some(MANAGED_BY.1);
    let name = super::lookup(object, &["metadata", "name"]).and_then(Value::as_str)?;
    let named = name.strip_suffix("-pdb") == Some(deployment);
    let shipped = crate::knative::COMPONENTS
        .iter()
        .any(|c| c.pdb == Some(name));
    (labelled && named && !shipped).then_some(deployment)
}

/// Whether a created PDB was taken over: a release applied its own budget
/// of the same name (Knative names its budgets `<deployment>-pdb`) over it.
/// The write shows it: both budget fields (a client- or server-side apply
/// adds the release's field beside the created one's, which the API server
/// refuses unless the webhook hands the budget over), or kubectl's
/// last-applied record, which the reconciler never writes.
pub fn taken_over(object: &Value) -> bool {
    let annotations = super::lookup(object, ANNOTATIONS);
    created_for(object).is_some()
        && (annotations.is_some_and(|a| a.get(LAST_APPLIED).is_some_and(|v| !v.is_null()))
            || holds_both_fields(object))
}

/// Whether the PDB holds both budget fields (which no writer sets alone:
/// the API server refuses it unless a webhook takes one out).
pub(crate) fn holds_both_fields(object: &Value) -> bool {
    budget(super::lookup(object, SPEC).and_then(Value::as_object)).len() == FIELDS.len()
}

/// The budget fields of `spec` that are set.
pub(crate) fn budget(spec: Option<&Map<String, Value>>) -> Map<String, Value> {
    FIELDS
        .iter()
        .filter_map(|f| {
            let v = spec?.get(*f).filter(|v| !v.is_null())?;
            Some((f.to_string(), v.clone()))
        })
        .collect()
}
