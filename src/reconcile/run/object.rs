//! A pass's writes: one governed object planned and written (a `test` of
//! its resourceVersion first, read again on a conflict), and one budget the
//! reconciler creates.

use std::ops::ControlFlow::{self, Break, Continue};

use json_patch::Patch;
use serde_json::Value;

use super::{Run, Target};
use crate::engine::Kind;
use crate::engine::budgets::{Action, BudgetChange};
use crate::reconcile::budgets;
use crate::reconcile::error;
use crate::reconcile::objects::{self, FIELD_MANAGER, RetryError};
use crate::reconcile::plan::{self, Drift};
use crate::reconcile::report::ObjectResult;

/// What happened to one object, and whether it still differs from its policy.
pub(super) struct Reconciled {
    pub(super) result: ObjectResult,
    pub(super) drift_left: bool,
}

impl Reconciled {
    /// Nothing left to do for the object.
    pub(super) fn settled(result: ObjectResult) -> Reconciled {
        Reconciled {
            result,
            drift_left: false,
        }
    }

    /// The object still differs from its policy.
    pub(super) fn drifting(result: ObjectResult) -> Reconciled {
        Reconciled {
            result,
            drift_left: true,
        }
    }

    pub(super) fn failed(error: &(dyn std::error::Error + 'static)) -> Reconciled {
        let error = crate::errors::chain(error);
        Reconciled::drifting(ObjectResult::Failed { error })
    }
}

/// Every change on one line, pod template changes marked.
fn changes_text(d: &Drift) -> String {
    d.changes
        .iter()
        .map(|c| {
            if c.rolls_pods {
                format!("{} (rolls pods)", c.change)
            } else {
                c.change.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// `Run::attempt` on one object, for [`objects::write_retrying`].
impl objects::Attempts for (&mut Run<'_>, &Target<'_>) {
    type Answer = Reconciled;

    fn attempt(
        &mut self,
        current: &Value,
        n: u32,
    ) -> impl Future<Output = ControlFlow<Reconciled, String>> + Send {
        self.0.attempt(self.1, current, n)
    }
}

impl Run<'_> {
    /// One write to a PodDisruptionBudget this tool creates (see
    /// [`budgets`]); a conflict waits for the next run.
    pub(super) async fn budget(&mut self, namespace: &str, change: &BudgetChange) -> Reconciled {
        let (kind, name) = (Kind::PodDisruptionBudget, change.name.as_str());
        if self.pass.options.dry_run {
            tracing::info!(kind = kind.as_str(), namespace, name, changes = %change.change,
                "reconcile: drift (dry run; not written)");
            return Reconciled::drifting(ObjectResult::DryRun);
        }
        if !(self.pass.may_write)() {
            return Reconciled::drifting(ObjectResult::Abandoned);
        }
        self.pass.limiter.acquire().await;
        match budgets::write(self.pass.client, &change.action).await {
            Ok(regarding) => {
                self.pass.metrics.write(kind, "success");
                tracing::info!(kind = kind.as_str(), namespace, name, changes = %change.change, "reconcile: written");
                if let Some(events) = self.pass.events {
                    events.written(&regarding, &change.change.to_string()).await;
                }
                Reconciled::settled(ObjectResult::Written { attempts: 1 })
            }
            Err(e) if error::is_not_found(&e) && matches!(change.action, Action::Delete(_)) => {
                Reconciled::settled(ObjectResult::Gone)
            }
            Err(e) => {
                let outcome = if error::is_precondition_failed(&e) {
                    "conflict"
                } else {
                    "error"
                };
                self.pass.metrics.write(kind, outcome);
                tracing::warn!(kind = kind.as_str(), namespace, name, error = %crate::errors::Chain(&e),
                    "reconcile: write failed; the next run plans it again");
                if error::is_forbidden(&e) {
                    self.refused(namespace, error::refused(change.action.verb(), kind, &e));
                }
                Reconciled::failed(&e)
            }
        }
    }

    /// One object: plan, write with a resourceVersion test, re-read and
    /// retry on conflict ([`objects::write_retrying`]).
    pub(super) async fn object(&mut self, t: &Target<'_>, listed: &Value) -> Reconciled {
        let client = self.pass.client;
        let attempts = &mut (&mut *self, t);
        let retried =
            objects::write_retrying(client, (t.kind, t.namespace, t.name), listed, attempts).await;
        let (kind, namespace, name) = (t.kind.as_str(), t.namespace, t.name);
        match retried {
            Ok(Some(outcome)) => outcome,
            Ok(None) => {
                tracing::info!(kind, namespace, name, "reconcile: object gone; skipped");
                Reconciled::settled(ObjectResult::Gone)
            }
            Err(RetryError::Reread(e)) => {
                tracing::warn!(kind, namespace, name, error = %crate::errors::Chain(&e), "reconcile: re-read failed");
                self.pass.metrics.write(t.kind, "error");
                if let Some(forbidden) = e.forbidden() {
                    self.refused(namespace, forbidden);
                }
                Reconciled::failed(&e)
            }
            Err(ref e @ RetryError::Conflicts { attempts, ref last }) => {
                tracing::warn!(kind, namespace, name, attempts, error = %last,
                    "reconcile: gave up after repeated conflicts; next run retries");
                Reconciled::failed(e)
            }
        }
    }

    /// Plans `current` and, when it differs and may be written, sends its
    /// patch; a lost race asks for another attempt.
    async fn attempt(
        &mut self,
        t: &Target<'_>,
        current: &Value,
        attempt: u32,
    ) -> ControlFlow<Reconciled, String> {
        let drift = self.plan(t, current)?;
        let changes = changes_text(&drift);
        let patch = self.patch(t, &drift, &changes)?;
        if !(self.pass.may_write)() {
            return Break(Reconciled::drifting(ObjectResult::Abandoned));
        }
        self.pass.limiter.acquire().await;
        if !(self.pass.may_write)() {
            return Break(Reconciled::drifting(ObjectResult::Abandoned));
        }
        let (kind, namespace, name) = (t.kind.as_str(), t.namespace, t.name);
        let client = self.pass.client;
        match objects::patch(client, t.kind, current, &patch, FIELD_MANAGER).await {
            Ok(_) => {
                self.pass.metrics.write(t.kind, "success");
                tracing::info!(kind, namespace, name, changes = %changes,
                    attempts = attempt, pod_template_ops_left_out = drift.held_back,
                    "reconcile: written");
                if let Some(events) = self.pass.events {
                    events.written(current, &changes).await;
                }
                Break(Reconciled {
                    result: ObjectResult::Written { attempts: attempt },
                    drift_left: drift.held_back > 0,
                })
            }
            Err(e) if error::is_precondition_failed(&e) => {
                self.pass.metrics.write(t.kind, "conflict");
                tracing::info!(kind, namespace, name, attempt, error = %crate::errors::Chain(&e),
                    "reconcile: the object changed since it was read; reading it again");
                Continue(crate::errors::chain(&e))
            }
            Err(e) if error::is_not_found(&e) => {
                tracing::info!(kind, namespace, name, "reconcile: object gone; skipped");
                Break(Reconciled::settled(ObjectResult::Gone))
            }
            Err(e) => {
                self.pass.metrics.write(t.kind, "error");
                tracing::warn!(kind, namespace, name, error = %crate::errors::Chain(&e), "reconcile: write failed");
                if error::is_forbidden(&e) {
                    self.refused(namespace, error::refused("patch", t.kind, &e));
                }
                Break(Reconciled::failed(&e))
            }
        }
    }

    /// How `current` differs from its policy; an outcome when it does not
    /// (or the engine cannot handle it).
    fn plan(&self, t: &Target<'_>, current: &Value) -> ControlFlow<Reconciled, Drift> {
        let (kind, namespace, name) = (t.kind.as_str(), t.namespace, t.name);
        let pod_templates = self.pass.options.pod_templates;
        let planned = match t.known.policy_for(namespace) {
            Some(_) => plan::plan(t.known, namespace, current, pod_templates),
            None => crate::reconcile::restore::plan_unclaimed(namespace, current, pod_templates),
        };
        match planned {
            Ok(Some(drift)) => Continue(drift),
            Ok(None) => {
                tracing::debug!(kind, namespace, name, "reconcile: in line");
                Break(Reconciled::settled(ObjectResult::InLine))
            }
            Err(error) => {
                tracing::warn!(kind, namespace, name, error = %crate::errors::Chain(&error),
                    "reconcile: the engine cannot handle this object; skipped");
                Break(Reconciled::failed(&error))
            }
        }
    }

    /// The patch to send; an outcome when none is sent (dry run, only pod
    /// template changes left out, no resourceVersion to test).
    fn patch(
        &self,
        t: &Target<'_>,
        drift: &Drift,
        changes: &str,
    ) -> ControlFlow<Reconciled, Patch> {
        let (kind, namespace, name) = (t.kind.as_str(), t.namespace, t.name);
        if self.pass.options.dry_run {
            tracing::info!(kind, namespace, name, changes = %changes,
                rolls_pods = drift.rolls_pods(), "reconcile: drift (dry run; not written)");
            return Break(Reconciled::drifting(ObjectResult::DryRun));
        }
        if let Some(patch) = drift.guarded_patch() {
            return Continue(patch);
        }
        if drift.held_back > 0 {
            tracing::info!(kind, namespace, name, changes = %changes,
                "reconcile: only pod template changes, left out by --reconcile-pod-templates=false; skipped");
            return Break(Reconciled::drifting(ObjectResult::SkippedPodTemplate));
        }
        tracing::warn!(
            kind,
            namespace,
            name,
            "reconcile: object has no resourceVersion; skipped"
        );
        Break(Reconciled::drifting(ObjectResult::Failed {
            error: "no metadata.resourceVersion".into(),
        }))
    }
}
