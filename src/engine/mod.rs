//! The mutation engine: a pure function from a [`Snapshot`] (the policies
//! and what the cluster is known to hold) and one admitted object to an
//! RFC 6902 patch plus the changes as data ([`Change`]), reached through
//! [`outcome`]. No I/O, no clocks, no globals.
//!
//! Rules (docs/policy.md is the user-facing version):
//! - only CREATE/UPDATE of objects in `policy.spec.targetNamespace` are
//!   mutated (and only when the object's own `metadata.namespace`, if set,
//!   agrees);
//! - kinds are matched by apiVersion and kind, as [`kinds::KINDS`] declares
//!   them (Deployment, ConfigMap `config-leader-election`,
//!   HorizontalPodAutoscaler, PodDisruptionBudget, a Deployment's Scale);
//!   anything else gets an empty mutation without being copied;
//! - objects labelled [`SKIP_LABEL`] `"true"` get an empty mutation;
//! - the patch is recorded while a copy of the object is changed
//!   ([`patch::Patcher`]), so it applies cleanly and mutating the result
//!   again yields an empty patch.

pub mod affinity;
pub mod budgets;
pub mod change;
pub mod configmap;
pub mod created;
pub mod deployment;
pub mod fault;
pub mod hpa;
pub mod kinds;
pub mod leader;
pub mod patch;
pub mod pdb;
pub mod records;
pub mod restore;
pub mod scale;
mod snapshot;
pub mod standing;
mod target;

pub use change::{Cause, Change, FieldChange, Reason, What};
pub use fault::Fault;
pub use snapshot::{Facts, Snapshot, Unclaimed};
pub(crate) use target::{Target, check_parents, lookup};

use serde_json::Value;

use crate::policy::Policy;

/// In a snapshot's `hpa_targets`: an HPA that carries the opt-out label
/// ([`SKIP_LABEL`]) targets the Deployment named after this prefix (a
/// Deployment name holds no `:`). The policy does not raise such an HPA, so
/// its Deployment runs what it runs without the policy.
pub const SKIPPED_HPA_TARGET: &str = "knativeha.dev/skipped-hpa:";

/// In a snapshot's `hpa_targets`: the set lists every HPA of the namespace
/// (a cluster listing, a synced watch; never `preview`'s manifests, which
/// may be partial), so an HPA-backed Deployment without an entry has no
/// HPA for the policy to raise.
pub const HPAS_LISTED: &str = "knativeha.dev/every-hpa-listed";

/// The entry of a snapshot's `hpa_targets` for an HPA targeting `deployment`;
/// `skipped`: the HPA carries the opt-out label.
pub fn hpa_target_entry(deployment: &str, skipped: bool) -> String {
    if skipped {
        format!("{SKIPPED_HPA_TARGET}{deployment}")
    } else {
        deployment.to_string()
    }
}

/// True when the object carries the opt-out label [`SKIP_LABEL`] `"true"`.
pub fn carries_skip_label(object: &Value) -> bool {
    skipped(object.get(METADATA).and_then(Value::as_object))
}

const API_VERSION: &str = "apiVersion";
const KIND: &str = "kind";
const METADATA: &str = "metadata";
const NAME: &str = "name";
const NAMESPACE: &str = "namespace";
const GENERATE_NAME: &str = "generateName";
const OWNER_REFERENCES: &str = "ownerReferences";
const LABELS: &str = "labels";

/// The API group of the Knative Operator's resources.
pub const OPERATOR_API_GROUP: &str = "operator.knative.dev";

/// The opt-out label: an object labelled `knativeha.dev/skip: "true"` is
/// never changed (the chart's webhook objectSelector keeps it from
/// admission; the engine itself, so `preview`, `audit` and the reconciler,
/// leaves it alone too).
pub const SKIP_LABEL: &str = "knativeha.dev/skip";

/// The flag that turns Knative's leader election off.
pub const DISABLE_HA_FLAG: &str = "--disable-ha";

/// The ConfigMap holding Knative's leader election settings.
pub const LEADER_ELECTION_CONFIGMAP: &str = "config-leader-election";

/// The admission operation of a review.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

/// The result of mutating one object.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Mutation {
    /// RFC 6902 patch; empty when nothing changes.
    pub patch: json_patch::Patch,
    /// What changes, and warnings, as data ([`Change`]; its line reads e.g.
    /// `deployment/controller: spec.replicas 1 -> 3 (policy serving)`).
    pub changes: Vec<Change>,
}

impl Mutation {
    pub fn is_empty(&self) -> bool {
        self.patch.0.is_empty()
    }

    /// The change lines.
    pub fn lines(&self) -> Vec<String> {
        change::lines(&self.changes)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("object is not a JSON object")]
    NotAnObject,
    /// `fault` is what is wrong, as data; this message prints it (the
    /// one place it is printed). Boxed: every engine call returns this
    /// error type, and the fault is the large part.
    #[error("{kind} {namespace}/{name}: {fault}")]
    Malformed {
        kind: String,
        namespace: String,
        name: String,
        fault: Box<Fault>,
    },
}

/// The result of this module's fallible functions.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// One object to mutate.
#[derive(Clone, Copy, Debug)]
pub struct Input<'a> {
    pub operation: Operation,
    /// The namespace the object lives in (the admission request's
    /// `namespace`; `default` for namespace-less documents in `preview`).
    pub namespace: &'a str,
    /// The object as the API server would store it (for UPDATE: the new object).
    pub object: &'a serde_json::Value,
}

impl<'a> Input<'a> {
    /// An UPDATE of `object` in `namespace`: what a write to an existing
    /// object is admitted as.
    pub fn update(namespace: &'a str, object: &'a Value) -> Input<'a> {
        Input {
            operation: Operation::Update,
            namespace,
            object,
        }
    }
}

/// A mutation together with the mutated object (`None` when unchanged).
#[derive(Clone, Debug, Default)]
pub struct Mutated {
    pub mutation: Mutation,
    pub object: Option<Value>,
}

/// The kinds the engine governs (each declared in [`kinds::KINDS`], in
/// this order).
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
        let api_version = object.get(API_VERSION)?.as_str()?;
        let kind = object.get(KIND)?.as_str()?;
        kinds::KINDS
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
}

/// What answers for an object.
#[derive(Clone, Copy, Debug)]
pub enum Answering<'a> {
    /// The policy the snapshot holds for the object's namespace, with what
    /// the snapshot knows there; nothing where it holds none.
    Governed(&'a Snapshot),
    /// No policy object exists at all: the engine's records are undone
    /// ([`restore::undo_unclaimed`]).
    Unclaimed,
    /// `restore`: every release value back ([`restore::restore`]).
    Restore,
}

/// The one way into the engine: the outcome of a CREATE or UPDATE of
/// `input.object` (any other operation changes nothing), for admission,
/// `preview`, `audit`, the reconciler and `restore` alike. Objects outside
/// a policy's `targetNamespace` never get a patch.
pub fn outcome(by: Answering<'_>, input: &Input<'_>) -> Result<Mutated> {
    let (namespace, object) = (input.namespace, input.object);
    if matches!(by, Answering::Governed(_)) && !object.is_object() {
        return Err(EngineError::NotAnObject);
    }
    if !matches!(input.operation, Operation::Create | Operation::Update) {
        return Ok(Mutated::default());
    }
    match by {
        Answering::Governed(snapshot) => match snapshot.policy_for(namespace) {
            Some(policy) => mutate_governed(policy, namespace, object, snapshot.facts(namespace)),
            None => Ok(Mutated::default()),
        },
        Answering::Unclaimed => restore::undo_unclaimed(namespace, object),
        Answering::Restore => restore::restore(namespace, object),
    }
}

fn mutate_governed(
    policy: &Policy,
    namespace: &str,
    object: &Value,
    facts: Facts<'_>,
) -> Result<Mutated> {
    let Some(target) = standing::aimed(policy, namespace, object, facts)? else {
        return Ok(Mutated::default());
    };
    let metadata = object.get(METADATA).and_then(Value::as_object);
    if skipped(metadata) {
        return Ok(Mutated::default());
    }
    if !target.governs_object()? {
        // A user's own object: left alone, its records too. Anyone who may
        // edit the object may write records, and putting them back would
        // write what they say (any replicas, any PriorityClass) with the
        // reconciler's identity: records are honoured only where a policy
        // governs the object. `restore` (with the user's own rights) puts
        // them back.
        if !restore::carries_records(object) {
            return Ok(Mutated::default());
        }
        return Ok(warning_only(vec![target.change(What::Warning(format!(
            "carries the records of an earlier policy ({UNGOVERNED_WHY} now): left alone, records are honoured only where a policy governs the object; `knative-ha-webhook restore` puts the release values back"
        )))]));
    }
    let (patcher, changes) = (target.kind.spec().mutate)(&target)?;
    match patcher {
        Some(p) if !p.ops.is_empty() => {
            // Checked only when there is something to change: the Operator's
            // objects are left alone, with a warning naming the owner.
            if let Some(owner) = standing::operator_left_alone(policy, metadata) {
                let why = standing::LeftAlone::OperatorOwned(owner);
                return Ok(warning_only(vec![
                    target.change(What::Warning(format!("left unchanged: {why}"))),
                ]));
            }
            Ok(Mutated {
                mutation: Mutation {
                    patch: json_patch::Patch(p.ops),
                    changes,
                },
                object: Some(p.doc),
            })
        }
        _ if !changes.is_empty() => Ok(warning_only(changes)),
        _ => Ok(Mutated::default()),
    }
}

/// Why the change lines of the undo of an ungoverned object are made.
pub const UNGOVERNED_WHY: &str =
    "not one of Knative's Deployments and not named by the policy's workloads";

/// An outcome without a patch, carrying warning lines.
fn warning_only(changes: Vec<Change>) -> Mutated {
    Mutated {
        mutation: Mutation {
            patch: json_patch::Patch(Vec::new()),
            changes,
        },
        object: None,
    }
}

/// True when the object carries the opt-out label [`SKIP_LABEL`] `"true"`.
pub(crate) fn skipped(metadata: Option<&serde_json::Map<String, Value>>) -> bool {
    metadata
        .and_then(|m| m.get(LABELS)?.get(SKIP_LABEL)?.as_str())
        .is_some_and(|v| v == "true")
}

/// `Kind/name` of an ownerReference whose apiVersion is the Knative
/// Operator's group (`operator.knative.dev/*`).
pub(crate) fn operator_owner(metadata: Option<&serde_json::Map<String, Value>>) -> Option<String> {
    let refs = metadata?.get(OWNER_REFERENCES)?.as_array()?;
    refs.iter().find_map(|r| {
        let api = r.get("apiVersion")?.as_str()?;
        let group = api.split('/').next()?;
        (group == OPERATOR_API_GROUP && api.contains('/')).then(|| {
            let field = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("?");
            format!("{}/{}", field("kind"), field("name"))
        })
    })
}

/// What a kind handler returns: the patcher (if it copied the object) and
/// the change lines.
pub(crate) type Handled = (Option<patch::Patcher>, Vec<Change>);
