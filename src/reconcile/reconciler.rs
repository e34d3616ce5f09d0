//! The running reconciler of `serve --reconcile`: it takes part in the
//! Lease election and, while it holds the Lease, polls the policy snapshot
//! and runs a [`Pass`] over the namespaces that are due.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::sync::watch;

use super::ReconcileConfig;
use super::events::EventWriter;
use super::lease::Elector;
use super::metrics::ReconcileMetrics;
use super::rate::RateLimiter;
use super::run::{MayWrite, Pass, RunOptions};
use super::schedule::{self, Schedule};
use crate::engine::Snapshot;
use crate::findings::{Board, Found};
use crate::store::PolicyStore;

/// The running reconciler.
pub struct Reconciler {
    client: kube::Client,
    config: ReconcileConfig,
    store: PolicyStore,
    metrics: ReconcileMetrics,
    events: EventWriter,
    /// Where each pass's verdict per namespace goes.
    findings: Board,
}

/// A reconciler running in the background (see [`Reconciler::spawn`]).
pub struct RunningReconciler {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl RunningReconciler {
    /// Stops reconciling and gives the Lease up; waits at most `timeout`.
    pub async fn stop(self, timeout: Duration) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(timeout, self.task).await;
    }
}

impl Reconciler {
    pub fn new(
        client: kube::Client,
        config: ReconcileConfig,
        store: PolicyStore,
        metrics: ReconcileMetrics,
    ) -> Reconciler {
        Reconciler {
            events: EventWriter::new(client.clone(), &config.lease.identity),
            client,
            config,
            store,
            metrics,
            findings: Board::default(),
        }
    }

    /// Publishes what each pass found the reconciler may do per namespace
    /// on `findings` (for the policies' `Ready` condition).
    pub fn with_findings(mut self, findings: Board) -> Reconciler {
        self.findings = findings;
        self
    }

    /// For `serve`: the reconciler with its metrics registered in `registry`.
    pub fn prepare(
        config: ReconcileConfig,
        client: kube::Client,
        store: &PolicyStore,
        registry: &mut prometheus_client::registry::Registry,
    ) -> Reconciler {
        let metrics = ReconcileMetrics::register(registry);
        Reconciler::new(client, config, store.clone(), metrics)
    }

    /// Runs in a background task until [`RunningReconciler::stop`].
    pub fn spawn(self) -> RunningReconciler {
        let (stop, rx) = watch::channel(false);
        RunningReconciler {
            stop,
            task: tokio::spawn(self.run(rx)),
        }
    }

    /// Runs until `stop` becomes true; then gives up the Lease.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let (leader_tx, mut leader_rx) = watch::channel(false);
        let elector = Elector::new(self.client.clone(), self.config.lease.clone());
        let election =
            tokio::spawn(elector.run(leader_tx, self.metrics.leader.clone(), stop.clone()));
        let config = &self.config;
        tracing::info!(
            identity = %config.lease.identity,
            lease = %format!("{}/{}", config.lease.namespace, config.lease.name),
            interval_s = config.interval.as_secs(),
            dry_run = config.dry_run,
            pod_templates = config.pod_templates,
            rate = config.rate,
            undo_unclaimed = config.undo_unclaimed,
            "reconciler starting"
        );
        let mut limiter = RateLimiter::new(self.config.rate);
        let mut schedule = Schedule::new(self.config.interval, self.config.settle);
        let mut released = Released::default();
        let mut operator_check = tokio::time::Instant::now() + self.config.operator_check;
        let mut poll = tokio::time::interval(self.config.poll);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => break,
                r = leader_rx.changed() => {
                    if r.is_err() {
                        break;
                    }
                    // A new leader starts with a full run; a former one no
                    // longer knows what the API server refuses.
                    schedule.restart();
                    if !*leader_rx.borrow() {
                        self.forget_findings();
                    }
                    continue;
                }
                _ = poll.tick() => {}
            }
            // With --undo-unclaimed, every replica remembers which
            // namespaces it saw governed, so that a new leader knows where a
            // policy was deleted.
            if self.config.undo_unclaimed {
                released.observe(&self.store.load());
            }
            if !*leader_rx.borrow() {
                continue;
            }
            let (leader, stopping) = (leader_rx.clone(), stop.clone());
            let may_write = move || *leader.borrow() && !*stopping.borrow();
            self.tick(&mut schedule, &mut limiter, &may_write).await;
            if tokio::time::Instant::now() >= operator_check {
                self.check_operator().await;
                operator_check = tokio::time::Instant::now() + self.config.operator_check;
            }
            if self.config.undo_unclaimed {
                self.restore_released(&mut released, &mut limiter, &may_write)
                    .await;
            }
        }
        let _ = election.await;
        self.forget_findings();
        tracing::info!("reconciler stopped");
    }

    /// Not reconciling: no verdict per namespace is known here any more.
    fn forget_findings(&self) {
        self.findings.retain(&|_| false);
        self.metrics.retain_findings(&|_| false);
    }

    /// A pass as configured (dry run, pod templates), writing Events.
    fn pass<'a>(&'a self, limiter: &'a mut RateLimiter, may_write: &'a MayWrite) -> Pass<'a> {
        Pass {
            client: &self.client,
            options: RunOptions {
                dry_run: self.config.dry_run,
                pod_templates: self.config.pod_templates,
            },
            limiter,
            metrics: &self.metrics,
            may_write,
            events: Some(&self.events),
        }
    }

    /// As the leader, with `--undo-unclaimed`: one pass over the namespaces
    /// whose policy was deleted ([`Released`]), undoing the engine's records
    /// there.
    async fn restore_released(
        &self,
        released: &mut Released,
        limiter: &mut RateLimiter,
        may_write: &MayWrite,
    ) {
        let snapshot = self.store.load();
        let mut due = released.due(&snapshot);
        due.retain(|ns| self.config.governed.allows(ns));
        if due.is_empty() {
            return;
        }
        tracing::info!(
            namespaces = %due.iter().cloned().collect::<Vec<_>>().join(","),
            "reconcile: no policy governs these namespaces any more; undoing the engine's records"
        );
        let report = self.pass(limiter, may_write).restore(&due).await;
        tracing::info!(
            objects = report.objects.len(),
            written = report.written(),
            ok = report.ok(),
            "reconcile: restore pass done"
        );
        released.done(&due, report.ok());
    }

    /// As the leader, between passes: reads the Knative Operator's resources
    /// of each namespace a pass has covered, and publishes the overrides
    /// (with an Event on the resource) where they changed, so that an edit
    /// of a KnativeServing reaches the policy's status without a pass.
    async fn check_operator(&self) {
        let snapshot = self.store.load();
        for (namespace, policy) in &snapshot.policies {
            let Some(mut found) = self.findings.get(namespace) else {
                continue;
            };
            let Some(coverage) = found.coverage.as_mut() else {
                continue;
            };
            let operator = super::coverage::list_operator(&self.client, namespace).await;
            coverage.overrides = crate::knative_operator::overrides(policy, &operator);
            self.publish(namespace, found).await;
        }
    }

    /// Puts a namespace's verdict on the board. Where the Knative
    /// Operator's fields the policy overrides changed, an Event on the
    /// Operator's resource says so first (not in a dry run).
    async fn publish(&self, namespace: &str, found: Found) {
        let was = self.findings.get(namespace);
        let overrides = |f: &Found| f.coverage.as_ref().map(|c| c.overrides.clone());
        if let Some(now) = overrides(&found)
            && was.as_ref().and_then(overrides).as_ref() != Some(&now)
            && !self.config.dry_run
        {
            self.events.overridden(namespace, &now).await;
        }
        self.findings.set(namespace, found);
    }

    /// One poll as the leader: runs over the namespaces that are due, if any.
    async fn tick(&self, schedule: &mut Schedule, limiter: &mut RateLimiter, may_write: &MayWrite) {
        let snapshot = self.store.load();
        if !snapshot.synced {
            return;
        }
        // Never outside --governed-namespaces, whatever the snapshot says.
        let mut now = schedule::seen(&snapshot);
        now.retain(|ns, _| self.config.governed.allows(ns));
        let due = schedule.due(&now);
        self.metrics.retain_namespaces(&|ns| now.contains_key(ns));
        self.findings.retain(&|ns| now.contains_key(ns));
        if due.namespaces.is_empty() {
            schedule.done(now, &due, true);
            return;
        }
        tracing::info!(
            namespaces = %due.namespaces.iter().cloned().collect::<Vec<_>>().join(","),
            reason = if due.full {
                "full"
            } else if due.changed.is_empty() {
                "settle after a change"
            } else {
                "policy changed"
            },
            "reconcile run starting"
        );
        let report = self
            .pass(limiter, may_write)
            .reconcile(&snapshot, Some(&due.namespaces))
            .await;
        tracing::info!(
            objects = report.objects.len(),
            written = report.written(),
            ok = report.ok(),
            "reconcile run done"
        );
        let ok = report.ok();
        for (namespace, verdict) in report.found {
            self.publish(&namespace, verdict).await;
        }
        schedule.done(now, &due, ok);
    }
}

/// With `--undo-unclaimed`: the namespaces this process saw governed, for
/// one restore pass each once no policy object names them any more (their
/// policy deleted), so that a deleted policy's changes are undone on every
/// object (admission undoes the records of the objects it is sent; this
/// pass, of the others).
/// Without it a deletion changes nothing; `restore` undoes.
#[derive(Debug, Default)]
pub(super) struct Released {
    /// Had a policy in force since this process started, not restored since.
    governed: BTreeSet<String>,
    /// Whose last pass failed, and when: retried after
    /// [`super::RETRY_AFTER_ERROR`].
    failed: BTreeMap<String, tokio::time::Instant>,
}

impl Released {
    pub(super) fn observe(&mut self, snapshot: &Snapshot) {
        if snapshot.synced {
            for ns in snapshot.policies.keys() {
                self.failed.remove(ns);
                self.governed.insert(ns.clone());
            }
        }
    }

    /// Governed before, no policy object now (a failed one again after a while).
    pub(super) fn due(&self, snapshot: &Snapshot) -> BTreeSet<String> {
        self.governed
            .iter()
            .filter(|ns| snapshot.unclaimed(ns))
            .filter(|ns| {
                self.failed
                    .get(*ns)
                    .is_none_or(|at| at.elapsed() >= super::RETRY_AFTER_ERROR)
            })
            .cloned()
            .collect()
    }

    pub(super) fn done(&mut self, namespaces: &BTreeSet<String>, ok: bool) {
        for ns in namespaces {
            if ok {
                self.governed.remove(ns);
                self.failed.remove(ns);
            } else {
                self.failed.insert(ns.clone(), tokio::time::Instant::now());
            }
        }
    }
}
