//! One reconcile run over some namespaces of a policy snapshot: every
//! governed object is planned, written with a `test` of its
//! resourceVersion, and on a conflict read again and recomputed, at most
//! [`MAX_ATTEMPTS`] times.

use std::collections::{BTreeMap, BTreeSet};

use json_patch::Patch;
use serde_json::Value;

use super::budgets::{self, BudgetChange};
use super::error::{self, Result};
use super::events::EventWriter;
use super::metrics::ReconcileMetrics;
use super::objects;
use super::plan::{self, Drift};
use super::rate::RateLimiter;
use super::report::{ObjectResult, RunReport};
use crate::engine::{Context, Kind};
use crate::policy::Policy;
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
        Run::new(self).over(selected).await
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
        Run::new(self).over(unclaimed).await
    }
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

/// What happened to one object, and whether it still differs from its policy.
struct Reconciled {
    result: ObjectResult,
    drift_left: bool,
}

impl Reconciled {
    /// Nothing left to do for the object.
    fn settled(result: ObjectResult) -> Reconciled {
        Reconciled {
            result,
            drift_left: false,
        }
    }

    /// The object still differs from its policy.
    fn drifting(result: ObjectResult) -> Reconciled {
        Reconciled {
            result,
            drift_left: true,
        }
    }

    fn failed(error: &(dyn std::error::Error + 'static)) -> Reconciled {
        Reconciled::failed_because(crate::errors::chain(error))
    }

    fn failed_because(reason: String) -> Reconciled {
        Reconciled::drifting(ObjectResult::Failed { error: reason })
    }
}

/// How one attempt at an object ended.
enum Attempt {
    Done(Reconciled),
    /// The write lost a race with another writer (the error): read again.
    Conflict(String),
}

/// Every change on one line, pod template changes marked.
fn changes_text(d: &Drift) -> String {
    d.changes
        .iter()
        .map(|c| {
            if c.rolls_pods {
                format!("{} (rolls pods)", c.change)
            } else {
                c.change.clone()
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The engine's context: the HPA targets listed now and those in the
/// snapshot; `config-leader-election` as listed now.
fn context_for(snapshot_targets: Option<&BTreeSet<String>>, listed: &objects::Listed) -> Context {
    let mut hpa_targets = listed.hpa_targets.clone();
    if let Some(t) = snapshot_targets {
        hpa_targets.extend(t.iter().cloned());
    }
    Context {
        hpa_targets,
        leader_election: listed.leader_election.clone(),
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
            if let Err(e) = self.namespace(policy, namespace, targets).await {
                tracing::warn!(namespace = %namespace, error = %crate::errors::Chain(&e), "reconcile: namespace failed");
                self.report.errors.push(crate::errors::chain(&e));
            }
        }
        self.pass.metrics.run(self.report.ok());
        self.report
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
            let outcome = self.object(&target, object).await;
            if outcome.drift_left {
                *drift.entry(kind.as_str()).or_default() += 1;
            }
            let key = (kind.as_str(), namespace.to_string(), name.to_string());
            self.report.objects.insert(key, outcome.result);
        }
        let kind = Kind::PodDisruptionBudget;
        for change in budgets::plan(policy, namespace, &listed.objects, &ctx) {
            let outcome = self.budget(namespace, &change).await;
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
                    events.written(&regarding, &change.change).await;
                }
                Reconciled::settled(ObjectResult::Written { attempts: 1 })
            }
            Err(e)
                if error::is_not_found(&e)
                    && matches!(change.action, budgets::Action::Delete(_)) =>
            {
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
                Reconciled {
                    drift_left: true,
                    ..Reconciled::failed(&e)
                }
            }
        }
    }

    /// One object: plan, write with a resourceVersion test, re-read and
    /// retry on conflict.
    async fn object(&mut self, t: &Target<'_>, listed: &Value) -> Reconciled {
        let mut current = listed.clone();
        let mut last_error = String::new();
        for attempt in 1..=MAX_ATTEMPTS {
            if attempt > 1 {
                current = match self.reread(t).await {
                    Ok(object) => object,
                    Err(outcome) => return outcome,
                };
            }
            match self.attempt(t, &current, attempt).await {
                Attempt::Done(outcome) => return outcome,
                Attempt::Conflict(error) => last_error = error,
            }
        }
        let (kind, namespace, name) = (t.kind.as_str(), t.namespace, t.name);
        tracing::warn!(kind, namespace, name, attempts = MAX_ATTEMPTS, error = %last_error,
            "reconcile: gave up after repeated conflicts; next run retries");
        Reconciled::failed_because(format!("{MAX_ATTEMPTS} conflicting attempts: {last_error}"))
    }

    /// The object as it is now, after a conflict.
    async fn reread(&self, t: &Target<'_>) -> Result<Value, Reconciled> {
        let (kind, namespace, name) = (t.kind.as_str(), t.namespace, t.name);
        match objects::get(self.pass.client, t.kind, t.namespace, t.name).await {
            Ok(Some(object)) => Ok(object),
            Ok(None) => {
                tracing::info!(kind, namespace, name, "reconcile: object gone; skipped");
                Err(Reconciled::settled(ObjectResult::Gone))
            }
            Err(e) => {
                tracing::warn!(kind, namespace, name, error = %crate::errors::Chain(&e), "reconcile: re-read failed");
                self.pass.metrics.write(t.kind, "error");
                Err(Reconciled::failed(&e))
            }
        }
    }

    /// Plans `current` and, when it differs and may be written, writes it.
    async fn attempt(&mut self, t: &Target<'_>, current: &Value, attempt: u32) -> Attempt {
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
        &self,
        t: &Target<'_>,
        current: &Value,
        patch: &Patch,
        drift: &Drift,
        changes: &str,
        attempt: u32,
    ) -> Attempt {
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
                Attempt::Done(Reconciled::failed(&e))
            }
        }
    }
}
