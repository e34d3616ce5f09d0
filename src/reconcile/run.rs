//! One reconcile run over some namespaces of a policy snapshot: every
//! governed object is planned, written with a `test` of its
//! resourceVersion, and on a conflict read again and recomputed, at most
//! [`super::objects::MAX_ATTEMPTS`] times.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};

use tracing::Instrument;

use super::error::Result;
use super::events::EventWriter;
use super::metrics::ReconcileMetrics;
use super::objects;
use super::rate::RateLimiter;
use super::report::RunReport;
use crate::engine::Kind;
use crate::engine::Snapshot;
use crate::findings::{Forbidden, Found};
use crate::policy::Policy;
use object::Reconciled;

mod object;

/// How a run behaves.
#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    pub dry_run: bool,
    pub pod_templates: bool,
}

/// Whether the run may still write (leader and not stopping).
pub type MayWrite = dyn Fn() -> bool + Send + Sync;

/// One pass of the reconciler: where and how it writes, how fast, what it
/// counts, whether it may still write, and whether written objects get an
/// Event saying what changed and why ([`super::events`]).
pub struct Pass<'a> {
    pub client: &'a kube::Client,
    pub options: RunOptions,
    pub limiter: &'a mut RateLimiter,
    pub metrics: &'a ReconcileMetrics,
    pub may_write: &'a MayWrite,
    pub events: Option<&'a EventWriter>,
}

/// A namespace a pass goes over, with its policy (none: the engine's
/// records are undone) and the snapshot's HPA targets there.
type Selected<'p> = (&'p str, Option<&'p Policy>, Option<&'p BTreeSet<String>>);

/// Passes started by this process (the `pass` of a pass's span).
static PASSES: AtomicU64 = AtomicU64::new(0);

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
        self.run("reconcile", selected).await
    }

    /// With `--undo-unclaimed` ([`super::ReconcileConfig::undo_unclaimed`]),
    /// once over `namespaces`, which no policy object names any more (their
    /// policy deleted, [`Snapshot::unclaimed`]): every object carrying the
    /// engine's records gets them undone, as at admission
    /// ([`crate::engine::restore::undo_unclaimed`]); objects without records
    /// are left alone. Written as [`Pass::reconcile`] writes (`dry_run`,
    /// rate, conflicts, Events).
    pub async fn restore(self, namespaces: &BTreeSet<String>) -> RunReport {
        let unclaimed = namespaces.iter().map(|ns| (ns.as_str(), None, None));
        self.run("restore", unclaimed).await
    }

    /// A run over `namespaces`, in the span `reconcile_pass` with `pass`
    /// (its number in this process, from 1) and `mode`.
    async fn run<'p>(
        self,
        mode: &'static str,
        namespaces: impl Iterator<Item = Selected<'p>>,
    ) -> RunReport {
        let pass = PASSES.fetch_add(1, Ordering::Relaxed) + 1;
        let run = Run {
            pass: self,
            report: RunReport::default(),
        };
        run.over(namespaces)
            .instrument(tracing::info_span!("reconcile_pass", pass, mode))
            .await
    }
}

/// A pass under way: the pass and what it found so far.
struct Run<'a> {
    pass: Pass<'a>,
    report: RunReport,
}

/// One governed object, and what it is brought in line with: its policy,
/// or none (no policy object names the namespace any more: the engine's
/// records are undone, [`super::restore::plan_unclaimed`]).
struct Target<'a> {
    /// The namespace's policy (if any) and what is known there.
    known: &'a Snapshot,
    namespace: &'a str,
    kind: Kind,
    name: &'a str,
}

impl Run<'_> {
    /// Each namespace in order, until the run may no longer write (a dry
    /// run goes on).
    async fn over<'p>(mut self, namespaces: impl Iterator<Item = Selected<'p>>) -> RunReport {
        for (namespace, policy, targets) in namespaces {
            if !(self.pass.may_write)() && !self.pass.options.dry_run {
                break;
            }
            self.report
                .found
                .insert(namespace.to_string(), Found::default());
            let policy_name = policy.map(|p| p.name.as_str());
            let span = tracing::info_span!("reconcile_namespace", namespace, policy = policy_name);
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
                .found
                .get(namespace)
                .and_then(|f| f.forbidden.as_ref())
                .is_some_and(|f| f.why == crate::findings::Refusal::Rbac);
            self.pass.metrics.set_forbidden(namespace, refused);
        }
        self.pass.metrics.run(self.report.ok());
        self.report
    }

    /// Records a request the API server refused in `namespace` (the first
    /// one is the namespace's verdict).
    fn refused(&mut self, namespace: &str, forbidden: Forbidden) {
        let verdict = self.report.found.entry(namespace.to_string()).or_default();
        if verdict.forbidden.is_none() {
            tracing::warn!(namespace, verb = %forbidden.verb, resource = %forbidden.resource, why = ?forbidden.why,
                "reconcile: the API server refuses the reconciler here (403 Forbidden); the policy's Ready condition says so");
            verdict.forbidden = Some(forbidden);
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
        let mut known = listed.known(namespace, policy, snapshot_targets);
        known.priority_classes = objects::priority_classes(self.pass.client, policy).await;
        let mut drift: BTreeMap<&'static str, i64> = BTreeMap::new();
        let mut record = |kind: Kind, name: &str, outcome: Reconciled| {
            if outcome.drift_left {
                *drift.entry(kind.as_str()).or_default() += 1;
            }
            let key = (kind.as_str(), namespace.to_string(), name.to_string());
            (key, outcome.result)
        };
        for object in &listed.objects {
            let Some(kind) = Kind::of(object) else {
                continue;
            };
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            let target = Target {
                known: &known,
                namespace,
                kind,
                name,
            };
            let span =
                tracing::info_span!("reconcile_object", kind = kind.as_str(), namespace, name);
            let outcome = self.object(&target, object).instrument(span).await;
            let (key, result) = record(kind, name, outcome);
            self.report.objects.insert(key, result);
        }
        let kind = Kind::PodDisruptionBudget;
        for change in crate::engine::budgets::plan(&known, namespace, &listed.objects) {
            let name = change.name.as_str();
            let span =
                tracing::info_span!("reconcile_object", kind = kind.as_str(), namespace, name);
            let outcome = self.budget(namespace, &change).instrument(span).await;
            let (key, result) = record(kind, name, outcome);
            self.report.objects.insert(key, result);
        }
        self.pass.metrics.set_drift(namespace, &drift);
        if policy.is_some() {
            let operator = super::coverage::list_operator(self.pass.client, namespace).await;
            let coverage = super::coverage::coverage(&known, namespace, &listed, &operator);
            self.pass.metrics.set_left_alone(namespace, &coverage);
            self.report
                .found
                .entry(namespace.to_string())
                .or_default()
                .coverage = Some(coverage);
        }
        Ok(())
    }
}
