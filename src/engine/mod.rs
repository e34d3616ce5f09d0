//! The mutation engine: a pure function from a [`Snapshot`] (the policies
//! and what the cluster is known to hold) and one admitted object to an
//! RFC 6902 patch plus the changes as data ([`Change`]), reached through
//! [`outcome`]. No I/O, no clocks, no globals. docs/policy.md states its
//! rules; kinds are matched as [`kinds::KINDS`] declares them, anything
//! else gets an empty mutation without being copied. The patch is recorded
//! while a copy of the object is changed ([`patch::Patcher`]), so it
//! applies cleanly and mutating the result again yields an empty patch.

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
pub use kinds::Kind;
pub use snapshot::{Facts, Snapshot, Unclaimed};
pub(crate) use target::{Target, check_parents, lookup};

use serde_json::Value;

use crate::policy::Policy;

/// In a snapshot's `hpa_targets`: the prefix of the Deployment (whose name
/// holds no `:`) an HPA carrying the opt-out label targets; the policy does
/// not raise such an HPA.
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
    skipped(object.get("metadata").and_then(Value::as_object))
}

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
    /// What changes, and warnings, as data.
    pub changes: Vec<Change>,
}

impl Mutation {
    pub fn is_empty(&self) -> bool {
        self.patch.0.is_empty()
    }

    /// The change lines.
    pub fn lines(&self) -> Vec<String> {
        self.changes.iter().map(Change::to_string).collect()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("object is not a JSON object")]
    NotAnObject,
    /// `fault`, as data, is printed here only. Boxed: every engine call
    /// returns this error type, and the fault is the large part.
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
    /// An UPDATE of `object` in `namespace`.
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

impl Mutated {
    /// What `p` (a changed copy, if any) did, with `changes`; without an
    /// operation, `changes` alone (warnings) and no patch.
    fn of(p: Option<patch::Patcher>, changes: Vec<Change>) -> Mutated {
        let (ops, object) = match p {
            Some(p) if !p.ops.is_empty() => (p.ops, Some(p.doc)),
            _ => (Vec::new(), None),
        };
        Mutated {
            mutation: Mutation {
                patch: json_patch::Patch(ops),
                changes,
            },
            object,
        }
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
    let metadata = object.get("metadata").and_then(Value::as_object);
    if skipped(metadata) {
        return Ok(Mutated::default());
    }
    if !target.governs_object()? {
        // A user's own object: left alone, its records too (anyone who may
        // edit it may write records, which the reconciler's identity would
        // put back). `restore`, with the user's own rights, puts them back.
        if !restore::carries_records(object) {
            return Ok(Mutated::default());
        }
        return Ok(Mutated::of(None, vec![target.change(What::Warning(
            "carries the records of an earlier policy (not one of Knative's Deployments and not named by the policy's workloads now): left alone, records are honoured only where a policy governs the object; `knative-ha-webhook restore` puts the release values back".to_string()
        ))]));
    }
    let (p, changes) = (target.kind.spec().mutate)(&target)?;
    // Checked only when there is something to change: the Operator's
    // objects are left alone, with a warning naming the owner.
    if p.as_ref().is_some_and(|p| !p.ops.is_empty())
        && let Some(owner) = standing::operator_left_alone(policy, metadata)
    {
        let why = standing::LeftAlone::OperatorOwned(owner);
        let warning = target.change(What::Warning(format!("left unchanged: {why}")));
        return Ok(Mutated::of(None, vec![warning]));
    }
    Ok(Mutated::of(p, changes))
}

/// True when the object carries the opt-out label [`SKIP_LABEL`] `"true"`.
pub(crate) fn skipped(metadata: Option<&serde_json::Map<String, Value>>) -> bool {
    metadata
        .and_then(|m| m.get("labels")?.get(SKIP_LABEL)?.as_str())
        .is_some_and(|v| v == "true")
}

/// `Kind/name` of an ownerReference whose apiVersion is the Knative
/// Operator's group (`operator.knative.dev/*`).
pub(crate) fn operator_owner(metadata: Option<&serde_json::Map<String, Value>>) -> Option<String> {
    let refs = metadata?.get("ownerReferences")?.as_array()?;
    refs.iter().find_map(|r| {
        let api = r.get("apiVersion")?.as_str()?;
        let group = api.split('/').next()?;
        (group == OPERATOR_API_GROUP && api.contains('/')).then(|| {
            let field = |k: &str| r.get(k).and_then(Value::as_str).unwrap_or("?");
            format!("{}/{}", field("kind"), field("name"))
        })
    })
}

/// What a kind handler returns: its copy of the object, if it made one,
/// and the changes.
pub(crate) type Handled = (Option<patch::Patcher>, Vec<Change>);
