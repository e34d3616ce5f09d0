//! A pass's writes: one governed object planned and written (a `test` of
//! its resourceVersion first, read again on a conflict), and one budget the
//! reconciler creates.

use json_patch::Patch;
use serde_json::Value;

use super::{Run, Target};
use crate::engine::Kind;
use crate::engine::budgets::{Action, BudgetChange};
use crate::reconcile::budgets;
use crate::reconcile::error;
use crate::reconcile::objects::{self, Attempt, RetryError};
use crate::reconcile::outcome::{Reconciled, changes_text};
use crate::reconcile::plan::{self, Drift};
use crate::reconcile::report::ObjectResult;

/// [`Run::attempt`] on one object, for [`objects::write_retrying`].
struct ObjectAttempts<'r, 'a, 't> {
    run: &'r mut Run<'a>,
    t: &'t Target<'t>,
}

impl objects::Attempts for ObjectAttempts<'_, '_, '_> {
    type Answer = Reconciled;

    fn attempt(
        &mut self,
        current: &Value,
        n: u32,
    ) -> impl Future<Output = Attempt<Reconciled>> + Send {
        self.run.attempt(self.t, current, n)
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
        let mut attempts = ObjectAttempts { run: self, t };
        let retried =
            objects::write_retrying(client, (t.kind, t.namespace, t.name), listed, &mut attempts)
                .await;
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

    /// Plans `current` and, when it differs and may be written, writes it.
    async fn attempt(
        &mut self,
        t: &Target<'_>,
        current: &Value,
        attempt: u32,
    ) -> Attempt<Reconciled> {
        let drift = match self.plan(t, current) {
            Ok(drift) => drift,
            Err(outcome) => return Attempt::Done(outcome),
        };
        let changes = changes_text(&drift);
        let patch = match self.patch(t, &drift, &changes) {
            Ok(patch) => patch,
            Err(outcome) => return Attempt::Done(outcome),
        };
        if !(self.pass.may_write)() {
            return Attempt::Done(Reconciled::drifting(ObjectResult::Abandoned));
        }
        self.pass.limiter.acquire().await;
        if !(self.pass.may_write)() {
            return Attempt::Done(Reconciled::drifting(ObjectResult::Abandoned));
        }
        self.write(t, current, &patch, &drift, &changes, attempt)
            .await
    }

    /// How `current` differs from its policy; an outcome when it does not
    /// (or the engine cannot handle it).
    fn plan(&self, t: &Target<'_>, current: &Value) -> Result<Drift, Reconciled> {
        let (kind, namespace, name) = (t.kind.as_str(), t.namespace, t.name);
        let planned = match t.known.policy_for(namespace) {
            Some(_) => plan::plan(t.known, namespace, current, self.pass.options.pod_templates),
            None => crate::reconcile::restore::plan_unclaimed(
                namespace,
                current,
                self.pass.options.pod_templates,
            ),
        };
        match planned {
            Ok(Some(drift)) => Ok(drift),
            Ok(None) => {
                tracing::debug!(kind, namespace, name, "reconcile: in line");
                Err(Reconciled::settled(ObjectResult::InLine))
            }
            Err(error) => {
                tracing::warn!(kind, namespace, name, error = %crate::errors::Chain(&error),
                    "reconcile: the engine cannot handle this object; skipped");
                Err(Reconciled::failed(&error))
            }
        }
    }

    /// The patch to send; an outcome when none is sent (dry run, only pod
    /// template changes left out, no resourceVersion to test).
    fn patch(&self, t: &Target<'_>, drift: &Drift, changes: &str) -> Result<Patch, Reconciled> {
        let (kind, namespace, name) = (t.kind.as_str(), t.namespace, t.name);
        if self.pass.options.dry_run {
            tracing::info!(kind, namespace, name, changes = %changes,
                rolls_pods = drift.rolls_pods(), "reconcile: drift (dry run; not written)");
            return Err(Reconciled::drifting(ObjectResult::DryRun));
        }
        if let Some(patch) = drift.guarded_patch() {
            return Ok(patch);
        }
        if drift.held_back > 0 {
            tracing::info!(kind, namespace, name, changes = %changes,
                "reconcile: only pod template changes, left out by --reconcile-pod-templates=false; skipped");
            return Err(Reconciled::drifting(ObjectResult::SkippedPodTemplate));
        }
        tracing::warn!(
            kind,
            namespace,
            name,
            "reconcile: object has no resourceVersion; skipped"
        );
        Err(Reconciled::failed_because(
            "no metadata.resourceVersion".into(),
        ))
    }

    /// Sends `patch`; a lost race asks for another attempt.
    async fn write(
        &mut self,
        t: &Target<'_>,
        current: &Value,
        patch: &Patch,
        drift: &Drift,
        changes: &str,
        attempt: u32,
    ) -> Attempt<Reconciled> {
        let (kind, namespace, name) = (t.kind.as_str(), t.namespace, t.name);
        match objects::patch(
            self.pass.client,
            t.kind,
            current,
            patch,
            objects::FIELD_MANAGER,
        )
        .await
        {
            Ok(_) => {
                self.pass.metrics.write(t.kind, "success");
                tracing::info!(kind, namespace, name, changes = %changes,
                    attempts = attempt, pod_template_ops_left_out = drift.held_back,
                    "reconcile: written");
                if let Some(events) = self.pass.events {
                    events.written(current, changes).await;
                }
                Attempt::Done(Reconciled {
                    result: ObjectResult::Written { attempts: attempt },
                    drift_left: drift.held_back > 0,
                })
            }
            Err(e) if error::is_precondition_failed(&e) => {
                self.pass.metrics.write(t.kind, "conflict");
                tracing::info!(kind, namespace, name, attempt, error = %crate::errors::Chain(&e),
                    "reconcile: the object changed since it was read; reading it again");
                Attempt::Conflict(crate::errors::chain(&e))
            }
            Err(e) if error::is_not_found(&e) => {
                tracing::info!(kind, namespace, name, "reconcile: object gone; skipped");
                Attempt::Done(Reconciled::settled(ObjectResult::Gone))
            }
            Err(e) => {
                self.pass.metrics.write(t.kind, "error");
                tracing::warn!(kind, namespace, name, error = %crate::errors::Chain(&e), "reconcile: write failed");
                if error::is_forbidden(&e) {
                    self.refused(namespace, error::refused("patch", t.kind, &e));
                }
                Attempt::Done(Reconciled::failed(&e))
            }
        }
    }
}
