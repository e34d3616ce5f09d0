//! What the engine changed, as data: the object, what changed there (the
//! field, its value before and after, and why, or a warning) and what it
//! comes from (a policy, `restore`, no policy). The edges render it:
//! admission warnings, the review log line, Events, `audit`'s table,
//! `preview` and `restore` print its [`fmt::Display`] line, e.g.
//! `deployment/controller: spec.replicas 1 -> 3 (policy serving)`; `audit`'s
//! table puts the object in its own columns ([`Change::detail`]).

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

/// One change (or warning) of one object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Change {
    /// The object's kind as change lines name it (`deployment`; a Scale's
    /// is the Deployment it scales).
    pub kind: &'static str,
    /// The object's name.
    pub name: String,
    /// What changed: the field with its value before and after and why, or
    /// a warning (`warning: ...`).
    pub what: String,
    pub cause: Cause,
}

impl Change {
    pub fn new(kind: &'static str, name: &str, what: impl fmt::Display, cause: Cause) -> Change {
        Change {
            kind,
            name: name.to_string(),
            what: what.to_string(),
            cause,
        }
    }

    /// A warning rather than a change.
    pub fn is_warning(&self) -> bool {
        self.what.starts_with("warning:")
    }

    /// The line without the object: what changed and its cause.
    pub fn detail(&self) -> String {
        let what = &self.what;
        match &self.cause {
            Cause::Policy(name) => format!("{what} (policy {name})"),
            Cause::Restored => format!("{what} (restored)"),
            Cause::Unstated => what.clone(),
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

/// The lines of `changes`.
pub fn lines(changes: &[Change]) -> Vec<String> {
    changes.iter().map(Change::to_string).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_render_the_cause() {
        let c = Change::new(
            "deployment",
            "controller",
            "spec.replicas 1 -> 3",
            Cause::Policy("serving".into()),
        );
        assert_eq!(
            c.to_string(),
            "deployment/controller: spec.replicas 1 -> 3 (policy serving)"
        );
        let r = Change::new(
            "deployment",
            "controller",
            "spec.replicas 3 -> 1",
            Cause::Restored,
        );
        assert_eq!(
            r.clone().undone_because("gone").to_string(),
            "deployment/controller: spec.replicas 3 -> 1 (gone: the release value, record removed)"
        );
        let u = Change::new(
            "deployment",
            "c",
            "x (restored; the pods roll)",
            Cause::Unstated,
        );
        assert_eq!(
            u.undone_because("gone").detail(),
            "x (restored; the pods roll) (gone)"
        );
    }
}
