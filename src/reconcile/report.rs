//! What a reconcile run reports: per object what happened, per namespace
//! what could not be listed and what the API server refused.

use std::collections::BTreeMap;

use crate::findings::Findings;

/// What happened to one object in a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ObjectResult {
    /// Patched (the number of attempts it took).
    Written { attempts: u32 },
    /// Already in line (also when a concurrent writer brought it in line).
    InLine,
    /// Differs; dry-run mode wrote nothing.
    DryRun,
    /// Differs only in the pod template, which `--reconcile-pod-templates=false` leaves alone.
    SkippedPodTemplate,
    /// The object disappeared before it could be written.
    Gone,
    /// The write failed (or every attempt met a conflict).
    Failed { error: String },
    /// This replica lost the Lease or is stopping: not attempted.
    Abandoned,
}

/// The result of a run over some namespaces.
#[derive(Clone, Debug, Default)]
pub struct RunReport {
    /// (kind, namespace, name) -> what happened.
    pub objects: BTreeMap<(&'static str, String, String), ObjectResult>,
    /// Namespaces that could not be listed, with the error.
    pub errors: Vec<String>,
    /// Per namespace the run went over: the first request the API server
    /// refused there with 403 Forbidden, and what its policy governs.
    pub found: Findings,
}

impl RunReport {
    pub fn written(&self) -> usize {
        self.objects
            .values()
            .filter(|r| matches!(r, ObjectResult::Written { .. }))
            .count()
    }

    pub fn ok(&self) -> bool {
        self.errors.is_empty()
            && !self
                .objects
                .values()
                .any(|r| matches!(r, ObjectResult::Failed { .. }))
    }
}
