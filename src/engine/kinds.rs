//! The kinds the engine governs, declared once: how each is recognised,
//! read and written, named in change lines and mutated, and which of its
//! fields `restore` puts back. Everything that handles a kind (the engine,
//! `restore`, the reconciler, the metrics, the test kit) reads [`KINDS`].
//!
//! Governing a new kind (say `apps/v1` StatefulSets) takes six places,
//! the last four asked for by the compiler or a failing test:
//! - a [`Kind`] variant and its entry here, in the same order;
//! - its handler module (the entry's `mutate`), declared in `engine`;
//! - its own marks in `restore` beyond its records (an exhaustive match);
//! - the chart's webhook rule and RBAC
//!   (`engine_governed::the_chart_names_every_governed_kind`);
//! - docs/server.md's `kind` label values and docs/policy.md's "Object |
//!   Change" table, two places one test asks for
//!   (`docs_tables::the_docs_list_every_governed_kind`).

use super::records::{
    HPA_MAX, HPA_MIN, LEADER_ELECTION_KEYS, OTHER_RECORDS, PRIORITY_CLASS, REPLICAS,
    ROLLOUT_MAX_SURGE, ROLLOUT_MAX_UNAVAILABLE, RecordedField, TOPOLOGY_SPREAD,
};
use serde_json::Value;

use super::{EngineError, Fault, Handled, LEADER_ELECTION_CONFIGMAP, Target};
use super::{configmap, deployment, hpa, pdb, scale};

/// The kinds the engine governs (each declared in [`KINDS`], in this
/// order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Deployment,
    ConfigMap,
    HorizontalPodAutoscaler,
    PodDisruptionBudget,
    /// A Deployment's `scale` subresource (`kubectl scale`).
    Scale,
}

impl Kind {
    /// Matches apiVersion (group/version) and kind.
    pub fn of(object: &Value) -> Option<Kind> {
        let api_version = object.get("apiVersion")?.as_str()?;
        let kind = object.get("kind")?.as_str()?;
        KINDS
            .iter()
            .find(|k| k.name == kind && k.api_versions.contains(&api_version))
            .map(|k| k.kind)
    }

    pub fn as_str(self) -> &'static str {
        self.spec().name
    }

    /// The lower-case prefix used in change messages.
    pub fn prefix(self) -> &'static str {
        self.spec().prefix
    }

    /// The error of a malformed object of this kind.
    pub(crate) fn malformed(
        self,
        namespace: &str,
        name: &str,
        fault: impl Into<Fault>,
    ) -> EngineError {
        EngineError::Malformed {
            kind: self.as_str().to_string(),
            namespace: namespace.to_string(),
            name: name.to_string(),
            fault: Box::new(fault.into()),
        }
    }
}

/// One governed kind.
pub struct KindSpec {
    pub kind: Kind,
    /// `kind` as objects carry it.
    pub name: &'static str,
    /// The apiVersions it is governed in.
    pub api_versions: &'static [&'static str],
    /// The API resource it is read and written as (a Scale's is its
    /// Deployment's; the webhook sees `deployments/scale`).
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    /// The kind of that resource's objects (a Scale's: `Deployment`).
    pub resource_kind: &'static str,
    /// The resource the webhook is registered for.
    pub webhook_resource: &'static str,
    /// How change lines name its objects (a Scale's name the Deployment).
    pub prefix: &'static str,
    /// Whether the reconciler lists and writes it.
    pub listed: bool,
    /// The fields the engine records before changing them (a PDB's budget
    /// is one record of its own, [`super::pdb`]).
    pub records: &'static [RecordedField],
    pub(crate) mutate: fn(&Target<'_>) -> Result<Handled, EngineError>,
    /// The Deployments an object of this kind named `name` belongs to, by
    /// name (whether it is governed, excluded, Knative's own).
    pub(crate) belongs_to: for<'a> fn(&'a str, &'a Value) -> [Option<&'a str>; 2],
    /// Given an object of this kind named `name` and the engine's result,
    /// the path (and what is under it) whose writes are unsafe without the
    /// pod template's: the reconciler holds them back with it.
    pub held_with_template: fn(&str, &Value, Option<&Value>) -> Option<&'static str>,
}

/// The Deployment itself (or the one a Scale scales).
fn itself<'a>(name: &'a str, _: &'a Value) -> [Option<&'a str>; 2] {
    [Some(name), None]
}

fn nothing_held(_: &str, _: &Value, _: Option<&Value>) -> Option<&'static str> {
    None
}

/// Every governed kind.
pub const KINDS: [KindSpec; 5] = [
    KindSpec {
        kind: Kind::Deployment,
        name: "Deployment",
        api_versions: &["apps/v1"],
        group: "apps",
        version: "v1",
        plural: "deployments",
        resource_kind: "Deployment",
        webhook_resource: "deployments",
        prefix: "deployment",
        listed: true,
        records: &[
            REPLICAS,
            ROLLOUT_MAX_UNAVAILABLE,
            ROLLOUT_MAX_SURGE,
            TOPOLOGY_SPREAD,
            PRIORITY_CLASS,
        ],
        mutate: deployment::mutate,
        belongs_to: itself,
        held_with_template: deployment::held_with_template,
    },
    KindSpec {
        kind: Kind::ConfigMap,
        name: "ConfigMap",
        api_versions: &["v1"],
        group: "",
        version: "v1",
        plural: "configmaps",
        resource_kind: "ConfigMap",
        webhook_resource: "configmaps",
        prefix: "configmap",
        listed: true,
        records: &LEADER_ELECTION_KEYS,
        mutate: configmap::mutate,
        belongs_to: |_, _| [None, None],
        held_with_template: |name, _, _| (name == LEADER_ELECTION_CONFIGMAP).then_some("/data"),
    },
    KindSpec {
        kind: Kind::HorizontalPodAutoscaler,
        name: "HorizontalPodAutoscaler",
        api_versions: &["autoscaling/v2", "autoscaling/v1"],
        group: "autoscaling",
        version: "v2",
        plural: "horizontalpodautoscalers",
        resource_kind: "HorizontalPodAutoscaler",
        webhook_resource: "horizontalpodautoscalers",
        prefix: "horizontalpodautoscaler",
        listed: true,
        records: &[HPA_MIN, HPA_MAX],
        mutate: hpa::mutate,
        belongs_to: hpa::deployment,
        held_with_template: nothing_held,
    },
    KindSpec {
        kind: Kind::PodDisruptionBudget,
        name: "PodDisruptionBudget",
        api_versions: &["policy/v1"],
        group: "policy",
        version: "v1",
        plural: "poddisruptionbudgets",
        resource_kind: "PodDisruptionBudget",
        webhook_resource: "poddisruptionbudgets",
        prefix: "poddisruptionbudget",
        listed: true,
        records: &[],
        mutate: pdb::mutate,
        belongs_to: pdb::deployments,
        held_with_template: nothing_held,
    },
    KindSpec {
        kind: Kind::Scale,
        name: "Scale",
        api_versions: &["autoscaling/v1"],
        group: "apps",
        version: "v1",
        plural: "deployments",
        resource_kind: "Deployment",
        webhook_resource: "deployments/scale",
        prefix: "deployment",
        listed: false,
        records: &[],
        mutate: scale::mutate,
        belongs_to: itself,
        held_with_template: nothing_held,
    },
];

impl Kind {
    /// Its declaration in [`KINDS`].
    pub fn spec(self) -> &'static KindSpec {
        // KINDS holds every variant, in declaration order.
        &KINDS[self as usize]
    }
}

/// The kinds the reconciler lists and writes, in [`KINDS`]' order.
pub fn listed() -> impl Iterator<Item = Kind> {
    KINDS.iter().filter(|k| k.listed).map(|k| k.kind)
}

/// Every annotation the engine keeps its records in: each kind's recorded
/// fields and their last writes, and the [`OTHER_RECORDS`].
pub fn record_annotations() -> impl Iterator<Item = &'static str> {
    KINDS
        .iter()
        .flat_map(|k| k.records)
        .flat_map(|r| [Some(r.annotation), r.written])
        .flatten()
        .chain(OTHER_RECORDS)
}

/// The governed kind named `name` (as objects carry it).
pub fn named(name: &str) -> Option<&'static KindSpec> {
    KINDS.iter().find(|k| k.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_is_at_its_index() {
        for (i, k) in KINDS.iter().enumerate() {
            assert_eq!(k.kind as usize, i, "{}", k.name);
            assert_eq!(k.kind.spec().name, k.name);
        }
    }
}
