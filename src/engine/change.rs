//! What the engine changed, as data: the object, what changed there
//! ([`What`]), why ([`Reason`]) and what it comes from ([`Cause`]). The
//! edges (admission warnings, the review log line, Events, `preview`,
//! `restore`) print its [`fmt::Display`] line, e.g. `deployment/controller:
//! spec.replicas 1 -> 3 (policy serving)`; `audit`'s table puts the object
//! in its own columns ([`Change::detail`]).

use std::fmt;

/// Where a change comes from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cause {
    /// The policy named so: `(policy NAME)`.
    Policy(String),
    /// `restore` put the release value back: `(restored)`.
    Restored,
    /// Nothing to add (a `restore` change that says it itself).
    Unstated,
    /// Undone for this reason: `(WHY)`.
    Because(String),
    /// The release value back for this reason:
    /// `(WHY: the release value, record removed)`.
    RestoredBecause(String),
}

/// Why a change was made, as its line says it after what changed.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// In parentheses: ` (WHY)`.
    Noted(String),
    /// After the way the change came: ` through ROUTE: WHY` (e.g. `the
    /// scale subresource`).
    Through { route: &'static str, why: String },
}

/// One field's value before and after, as change lines show them.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FieldChange {
    /// The field as shown: `spec.replicas`, `data.lease-duration`.
    pub field: String,
    /// `1`, `unset`, `unset (25%)`, `"15s"`; None where the line shows only
    /// the value written (`spec.minAvailable 2`).
    pub before: Option<String>,
    /// [`REMOVED`] where the field goes.
    pub after: String,
    /// In a Deployment's pod template: writing it starts a rollout.
    pub pod_template: bool,
}

/// What [`FieldChange::after`] shows for a field removed.
pub const REMOVED: &str = "removed";

impl FieldChange {
    /// `field before -> after`.
    pub fn new(
        field: impl Into<String>,
        before: impl Into<String>,
        after: impl Into<String>,
    ) -> FieldChange {
        FieldChange {
            field: field.into(),
            before: Some(before.into()),
            after: after.into(),
            pod_template: false,
        }
    }

    /// The field at `path` (shown as its keys joined by `.`), `before ->
    /// after` (`None`: removed); in the pod template where `path` is.
    pub fn at(path: &[&str], before: impl Into<String>, after: Option<String>) -> FieldChange {
        FieldChange {
            pod_template: path.starts_with(&["spec", "template"]),
            ..FieldChange::new(path.join("."), before, after.unwrap_or(REMOVED.into()))
        }
    }

    /// The same change, of a field in the pod template.
    pub fn in_pod_template(self) -> FieldChange {
        FieldChange {
            pod_template: true,
            ..self
        }
    }

    /// `field before -> removed`.
    pub fn removed(field: impl Into<String>, before: impl Into<String>) -> FieldChange {
        FieldChange::new(field, before, REMOVED)
    }
}

/// Whose marked anti-affinity term a change removed, as its line says.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum TermOwner {
    /// The policy's, which no longer asks for one.
    Policy,
    /// The engine's own, in `restore`.
    Engine,
}

/// One topology spread constraint as a change line shows it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Spread {
    pub topology_key: String,
    pub max_skew: i32,
    pub when_unsatisfiable: &'static str,
    pub node_taints_policy: &'static str,
}

/// What changed on the object (or a warning about it).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum What {
    /// Fields set or removed, in one line:
    /// `spec.minReplicas 1 -> 3, spec.maxReplicas 5 -> 7`.
    Fields(Vec<FieldChange>),
    /// Not a change.
    Warning(String),
    /// A recorded field already at its release value, the record removed.
    KeptRelease {
        field: String,
        value: String,
        record: &'static str,
    },
    /// A recorded field someone else changed since the engine's last write
    /// (`written`): theirs stays, the records go.
    KeptTheirs {
        field: String,
        value: String,
        written: String,
    },
    /// An argument added to or removed from a container's args (no
    /// container: `restore`'s, in the Knative container or every one).
    ContainerArg {
        container: Option<String>,
        arg: &'static str,
        added: bool,
    },
    /// An argument already as recorded (there or absent), the record removed.
    ArgKept {
        arg: &'static str,
        present: bool,
        record: &'static str,
    },
    /// The engine's pod anti-affinity term set; `strength`: its type
    /// (`Preferred`, `Required`), `downgraded`: why it is not the policy's.
    AntiAffinitySet {
        strength: &'static str,
        downgraded: Option<String>,
        topology_key: String,
    },
    /// The engine's marked anti-affinity term removed.
    AntiAffinityRemoved(TermOwner),
    /// The policy's topology spread constraints set.
    SpreadSet(Vec<Spread>),
    /// A PDB the reconciler created; `budget`: `maxUnavailable 1`.
    BudgetCreated { budget: String, deployment: String },
    /// A created PDB's budget changed.
    BudgetChanged { before: String, after: String },
    /// A created PDB deleted, no longer wanted.
    BudgetDeleted { deployment: String },
}

impl What {
    /// One field: `field before -> after`.
    pub fn field(
        field: impl Into<String>,
        before: impl Into<String>,
        after: impl Into<String>,
    ) -> What {
        What::Fields(vec![FieldChange::new(field, before, after)])
    }

    /// Whether the change writes a Deployment's pod template (and so starts
    /// a rollout): the anti-affinity term, the spread constraints, a
    /// container's args, a field of the template.
    pub fn in_pod_template(&self) -> bool {
        match self {
            What::AntiAffinitySet { .. }
            | What::AntiAffinityRemoved(_)
            | What::SpreadSet(_)
            | What::ContainerArg { .. } => true,
            What::Fields(fields) => fields.iter().any(|f| f.pod_template),
            What::Warning(_)
            | What::KeptRelease { .. }
            | What::KeptTheirs { .. }
            | What::ArgKept { .. }
            | What::BudgetCreated { .. }
            | What::BudgetChanged { .. }
            | What::BudgetDeleted { .. } => false,
        }
    }

    /// The fields whose values changed (none for the other kinds).
    pub fn fields(&self) -> &[FieldChange] {
        match self {
            What::Fields(fields) => fields,
            _ => &[],
        }
    }
}

/// One change (or warning) of one object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Change {
    /// The object's kind as change lines name it (`deployment`; a Scale's
    /// is the Deployment it scales).
    pub kind: &'static str,
    /// The object's name.
    pub name: String,
    pub what: What,
    /// Why it was made, where its line says so (after what changed, before
    /// the cause).
    pub reason: Option<Reason>,
    pub cause: Cause,
}

impl Change {
    pub fn new(kind: &'static str, name: &str, what: What, cause: Cause) -> Change {
        Change {
            kind,
            name: name.to_string(),
            what,
            reason: None,
            cause,
        }
    }

    /// The same change, saying why in parentheses ([`Reason::Noted`]).
    pub fn noted(self, why: impl Into<String>) -> Change {
        Change {
            reason: Some(Reason::Noted(why.into())),
            ..self
        }
    }

    /// A warning rather than a change.
    pub fn is_warning(&self) -> bool {
        matches!(self.what, What::Warning(_))
    }

    /// The line without the object: what changed, why and its cause.
    pub fn detail(&self) -> String {
        let what = match &self.reason {
            Some(reason) => format!("{}{reason}", self.what),
            None => self.what.to_string(),
        };
        match &self.cause {
            Cause::Policy(name) => format!("{what} (policy {name})"),
            Cause::Restored => format!("{what} (restored)"),
            Cause::Unstated => what,
            Cause::Because(why) => format!("{what} ({why})"),
            Cause::RestoredBecause(why) => {
                format!("{what} ({why}: the release value, record removed)")
            }
        }
    }

    /// The same change undone because `why` (no policy governs the object
    /// any more): a put-back release value says so.
    pub fn undone_because(self, why: &str) -> Change {
        let cause = match self.cause {
            Cause::Restored => Cause::RestoredBecause(why.to_string()),
            _ => Cause::Because(why.to_string()),
        };
        Change { cause, ..self }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::Noted(why) => write!(f, " ({why})"),
            Reason::Through { route, why } => write!(f, " through {route}: {why}"),
        }
    }
}

impl fmt::Display for FieldChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.before {
            Some(before) => write!(f, "{} {before} -> {}", self.field, self.after),
            None => write!(f, "{} {}", self.field, self.after),
        }
    }
}

impl fmt::Display for Spread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (maxSkew {}, {}, nodeTaintsPolicy {}, per ReplicaSet)",
            self.topology_key, self.max_skew, self.when_unsatisfiable, self.node_taints_policy
        )
    }
}

/// `a, b, c`.
fn joined<T: fmt::Display>(items: &[T]) -> String {
    let items: Vec<String> = items.iter().map(T::to_string).collect();
    items.join(", ")
}

impl fmt::Display for What {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            What::Fields(fields) => f.write_str(&joined(fields)),
            What::Warning(text) => write!(f, "warning: {text}"),
            What::KeptRelease {
                field,
                value,
                record,
            } => write!(
                f,
                "{field} {value} kept (the release value), record {record} removed"
            ),
            What::KeptTheirs {
                field,
                value,
                written,
            } => write!(
                f,
                "{field} {value} kept: changed since the engine wrote {written}; records removed"
            ),
            What::ContainerArg {
                container,
                arg,
                added,
            } => {
                let name = container
                    .as_ref()
                    .map(|c| format!(" {c}"))
                    .unwrap_or_default();
                let sign = if *added { '+' } else { '-' };
                write!(f, "container{name} args {sign} {arg}")
            }
            What::ArgKept {
                arg,
                present,
                record,
            } => {
                let absent = if *present { "" } else { " absent" };
                write!(f, "{arg}{absent} as recorded; record {record} removed")
            }
            What::AntiAffinitySet {
                strength,
                downgraded,
                topology_key,
            } => {
                let why = downgraded
                    .as_ref()
                    .map(|d| format!(", {d}"))
                    .unwrap_or_default();
                write!(
                    f,
                    "pod anti-affinity set to {strength}{why} on {topology_key}"
                )
            }
            What::AntiAffinityRemoved(owner) => {
                let owner = match owner {
                    TermOwner::Policy => "policy",
                    TermOwner::Engine => "engine",
                };
                write!(f, "pod anti-affinity: the {owner}'s own term removed")
            }
            What::SpreadSet(list) => write!(f, "topology spread set to {}", joined(list)),
            What::BudgetCreated { budget, deployment } => write!(
                f,
                "created, {budget}, for deployment/{deployment}, which has none"
            ),
            What::BudgetChanged { before, after } => write!(f, "{before} -> {after}"),
            What::BudgetDeleted { deployment } => write!(
                f,
                "deleted, created for deployment/{deployment} and no longer wanted"
            ),
        }
    }
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}: {}", self.kind, self.name, self.detail())
    }
}

/// Serialized as its line (`preview -o json`'s `changes`).
impl serde::Serialize for Change {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests;
