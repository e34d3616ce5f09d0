//! One reconcile run over some namespaces of a policy snapshot: every
//! governed object is planned, written with a `test` of its
//! resourceVersion, and on a conflict read again and recomputed, at most
//! [`MAX_ATTEMPTS`] times.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};

use json_patch::Patch;
use serde_json::Value;
use tracing::{Instrument, Span};

use super::budgets;
use super::error::{self, Result};
use super::events::EventWriter;
use super::metrics::ReconcileMetrics;
use super::objects::{self, Attempt, Retried, RetryError};
use super::outcome::{Reconciled, changes_text, context_for};
use super::plan::{self, Drift};
use super::rate::RateLimiter;
use super::report::{ObjectResult, RunReport};
use crate::engine::budgets::{Action, BudgetChange};
use crate::engine::{Context, Kind};
use crate::policy::Policy;
use crate::rights::Forbidden;
use crate::store::Snapshot;

pub use super::error::MAX_ATTEMPTS;

/// How a run behaves.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    pub dry_run: bool,
    pub pod_templates: bool,
}

/// Whether the run may still write (leader and not stopping).
pub trait MayWrite: Send + Sync {
    fn may_write(&self) -> bool;
}

impl<F: Fn() -> bool + Send + Sync> MayWrite for F {
    fn may_write(&self) -> bool {
        self()
    }
}

/// One pass of the reconciler: where and how it writes, how fast, what it
/// counts, whether it may still write, and whether written objects get an
/// Event saying what changed and why ([`super::events`]).
pub struct Pass<'a> {
    pub client: &'a kube::Client,
    pub options: RunOptions,
    pub limiter: &'a mut RateLimiter,
    pub metrics: &'a ReconcileMetrics,
    pub may_write: &'a dyn MayWrite,
    pub events: Option<&'a EventWriter>,
}

impl Pass<'_> {
    /// Reconciles the given namespaces of `snapshot` once (every governed
    /// namespace when `namespaces` is None).
    pub async fn reconcile(
        self,
        snapshot: &Snapshot,
        namespaces: Option<&BTreeSet<String>>,
    ) -> RunReport {
        let selected = snapshot
            .policies
            .iter()
            .filter(|(namespace, _)| namespaces.is_none_or(|n| n.contains(*namespace)))
            .map(|(namespace, policy)| {
                (
                    namespace.as_str(),
                    Some(policy.as_ref()),
                    snapshot.hpa_targets.get(namespace),
                )
            });
        Run::new(self)
            .over(selected)
            .instrument(pass_span("reconcile"))
            .await
    }

    /// With `--undo-unclaimed` ([`super::ReconcileConfig::undo_unclaimed`]),
    /// once over `namespaces`, which no policy object names any more (their
    /// policy deleted, [`Snapshot::unclaimed`]): every object carrying the
    /// engine's records gets them undone, as at admission
    /// ([`crate::engine::restore::undo_unclaimed`]); objects without records
    /// are left alone. Written as [`Pass::reconcile`] writes (`dry_run`,
    /// rate, conflicts, Events).
    pub async fn restore(self, namespaces: &BTreeSet<String>) -> RunReport {
        let unclaimed = namespaces
            .iter()
            .map(|namespace| (namespace.as_str(), None, None));
        Run::new(self)
            .over(unclaimed)
            .instrument(pass_span("restore"))
            .await
    }
}

/// Passes started by this process, for [`pass_span`].
static PASSES: AtomicU64 = AtomicU64::new(0);

/// The span of one pass: `pass` (its number in this process, from 1) and
/// `mode` (`reconcile`, or `restore` for [`Pass::restore`]).
fn pass_span(mode: &'static str) -> Span {
    let pass = PASSES.fetch_add(1, Ordering::Relaxed) + 1;
    tracing::info_span!("reconcile_pass", pass, mode)
}

/// The span of one namespace in a pass: `namespace` and `policy` (the
/// policy's name; none when the engine's records are undone).
fn namespace_span(namespace: &str, policy: Option<&Policy>) -> Span {
    let policy = policy.map(|p| p.name.as_str());
    tracing::info_span!("reconcile_namespace", namespace, policy)
}

/// The span of one object handled in a pass: `kind`, `namespace`, `name`.
fn object_span(kind: Kind, namespace: &str, name: &str) -> Span {
    tracing::info_span!("reconcile_object", kind = kind.as_str(), namespace, name)
}

/// A pass under way: the pass and what it found so far.
struct Run<'a> {
    pass: Pass<'a>,
    report: RunReport,
}

impl<'a> Run<'a> {
    fn new(pass: Pass<'a>) -> Run<'a> {
        Run {
            pass,
            report: RunReport::default(),
        }
    }
}

/// One governed object, and what it is brought in line with: its policy,
/// or none (no policy object names the namespace any more: the engine's
/// records are undone, [`super::restore::plan_unclaimed`]).
struct Target<'a> {
    policy: Option<&'a Policy>,
    ctx: &'a Context,
    namespace: &'a str,
    kind: Kind,
    name: &'a str,
}

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
    /// Each namespace, in order, with its policy (none: the engine's records
    /// are undone) and the snapshot's HPA targets, until the run may no
    /// longer write (a dry run goes on).
    async fn over<'p>(
        mut self,
        namespaces: impl Iterator<Item = (&'p str, Option<&'p Policy>, Option<&'p BTreeSet<String>>)>,
    ) -> RunReport {
        for (namespace, policy, targets) in namespaces {
            if !self.pass.may_write.may_write() && !self.pass.options.dry_run {
                break;
            }
            self.report.access.insert(namespace.to_string(), None);
            let span = namespace_span(namespace, policy);
            let done = self.namespace(policy, namespace, targets).instrument(span);
            if let Err(e) = done.await {
                tracing::warn!(namespace = %namespace, error = %crate::errors::Chain(&e), "reconcile: namespace failed");
                self.report.errors.push(crate::errors::chain(&e));
                if let Some(forbidden) = e.forbidden() {
                    self.refused(namespace, forbidden);
                }
            }
            let refused = self
                .report
                .access
                .get(namespace)
                .is_some_and(Option::is_some);
            self.pass.metrics.set_forbidden(namespace, refused);
        }
        self.pass.metrics.run(self.report.ok());
        self.report
    }

    /// Records a request the API server refused in `namespace` (the first
    /// one is the namespace's verdict).
    fn refused(&mut self, namespace: &str, forbidden: Forbidden) {
        let verdict = self.report.access.entry(namespace.to_string()).or_default();
        if verdict.is_none() {
            tracing::warn!(namespace, verb = %forbidden.verb, resource = %forbidden.resource,
                "reconcile: the API server refuses the reconciler here (403 Forbidden); the policy's Ready condition says so");
            *verdict = Some(forbidden);
        }
    }

    /// Brings one namespace in line. Errors listing the namespace end it;
    /// per-object failures are recorded in the report.
    async fn namespace(
        &mut self,
        policy: Option<&Policy>,
        namespace: &str,
        snapshot_targets: Option<&BTreeSet<String>>,
    ) -> Result<()> {
        let listed = objects::list_namespace(self.pass.client, namespace).await?;
        let ctx = context_for(snapshot_targets, &listed);
        let mut drift: BTreeMap<&'static str, i64> = BTreeMap::new();
        for object in &listed.objects {
            let Some(kind) = Kind::of(object) else {
                continue;
            };
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            let target = Target {
                policy,
                ctx: &ctx,
                namespace,
                kind,
                name,
            };
            let span = object_span(kind, namespace, name);
            let outcome = self.object(&target, object).instrument(span).await;
            if outcome.drift_left {
                *drift.entry(kind.as_str()).or_default() += 1;
            }
            let key = (kind.as_str(), namespace.to_string(), name.to_string());
            self.report.objects.insert(key, outcome.result);
        }
        let kind = Kind::PodDisruptionBudget;
        for change in crate::engine::budgets::plan(policy, namespace, &listed.objects, &ctx) {
            let span = object_span(kind, namespace, &change.name);
            let outcome = self.budget(namespace, &change).instrument(span).await;
            if outcome.drift_left {
                *drift.entry(kind.as_str()).or_default() += 1;
            }
            let key = (kind.as_str(), namespace.to_string(), change.name);
            self.report.objects.insert(key, outcome.result);
        }
        self.pass.metrics.set_drift(namespace, &drift);
        Ok(())
    }

    /// One write to a PodDisruptionBudget this tool creates (see
    /// [`budgets`]); a conflict waits for the next run.
    async fn budget(&mut self, namespace: &str, change: &BudgetChange) -> Reconciled {
        let (kind, name) = (Kind::PodDisruptionBudget, change.name.as_str());
        if self.pass.options.dry_run {
            tracing::info!(kind = kind.as_str(), namespace, name, changes = %change.change,
                "reconcile: drift (dry run; not written)");
            return Reconciled::drifting(ObjectResult::DryRun);
        }
        if !self.pass.may_write.may_write() {
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
                    self.refused(namespace, error::refused(change.action.verb(), kind));
                }
                Reconciled::failed(&e)
            }
        }
    }

    /// One object: plan, write with a resourceVersion test, re-read and
    /// retry on conflict ([`objects::write_retrying`]).
    async fn object(&mut self, t: &Target<'_>, listed: &Value) -> Reconciled {
        let client = self.pass.client;
        let mut attempts = ObjectAttempts { run: self, t };
        let retried =
            objects::write_retrying(client, (t.kind, t.namespace, t.name), listed, &mut attempts)
                .await;
        let (kind, namespace, name) = (t.kind.as_str(), t.namespace, t.name);
        match retried {
            Ok(Retried::Done(outcome)) => outcome,
            Ok(Retried::Gone) => {
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
        if !self.pass.may_write.may_write() {
            return Attempt::Done(Reconciled::drifting(ObjectResult::Abandoned));
        }
        self.pass.limiter.acquire().await;
        if !self.pass.may_write.may_write() {
            return Attempt::Done(Reconciled::drifting(ObjectResult::Abandoned));
        }
        self.write(t, current, &patch, &drift, &changes, attempt)
            .await
    }

    /// How `current` differs from its policy; an outcome when it does not
    /// (or the engine cannot handle it).
    fn plan(&self, t: &Target<'_>, current: &Value) -> Result<Drift, Reconciled> {
        let (kind, namespace, name) = (t.kind.as_str(), t.namespace, t.name);
        let planned = match t.policy {
            Some(policy) => plan::plan(
                policy,
                namespace,
                current,
                t.ctx,
                self.pass.options.pod_templates,
            ),
            None => {
                super::restore::plan_unclaimed(namespace, current, self.pass.options.pod_templates)
            }
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
                    self.refused(namespace, error::refused("patch", t.kind));
                }
                Attempt::Done(Reconciled::failed(&e))
            }
        }
    }
}
