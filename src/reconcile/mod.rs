//! Bringing existing objects in line: the reconciler (`serve --reconcile`)
//! and drift reports (`knative-ha-webhook audit`).
//!
//! An admission webhook only sees writes. The reconciler also applies the
//! policy to what already runs: when a policy becomes effective or changes
//! (it polls the [`PolicyStore`] snapshot and compares policies and HPA
//! targets per namespace), and every `--reconcile-interval`, the replica
//! holding the Lease `knative-ha-webhook-reconcile` lists the governed kinds
//! of each governed namespace, runs the engine (operation UPDATE) and sends
//! each non-empty patch as a JSON patch that starts with a `test` of
//! `metadata.resourceVersion`. A concurrent writer makes that test fail
//! (or the API server answer 409): the object is read again and the patch
//! recomputed, at most [`MAX_ATTEMPTS`] times. The write passes through the
//! webhook, which computes an empty patch (the engine is idempotent), so
//! one write converges.
//!
//! - [`plan`]: pure drift computation (which changes roll pods).
//! - [`objects`]: list/get/patch of governed objects.
//! - [`lease`]: leader election. [`metrics`]: the reconcile metrics.
//! - [`audit`]: the `audit` command.

pub mod audit;
mod error;
pub mod lease;
pub mod metrics;
pub mod objects;
pub mod plan;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;
use tokio::time::Instant;

pub use error::{ReconcileError, Result};
pub use lease::{LEASE_NAME, LeaseConfig};
pub use metrics::ReconcileMetrics;
pub use plan::{ChangeLine, Drift};

use crate::engine::{Context, Kind};
use crate::policy::Policy;
use crate::sources::Governed;
use crate::store::{PolicyStore, Snapshot};

/// Attempts per object: the first write plus retries after conflicts.
pub const MAX_ATTEMPTS: u32 = 4;
/// How often the policy snapshot is checked for changes.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);
/// After a failed run: when to try again (instead of the full interval).
pub const RETRY_AFTER_ERROR: Duration = Duration::from_secs(30);

/// `serve` flags of the reconciler.
#[derive(clap::Args, Debug, Clone)]
pub struct ReconcileArgs {
    /// Bring governed objects that already exist in line with the policy
    /// (when a policy becomes effective or changes, and every
    /// --reconcile-interval). Only the replica holding the Lease
    /// `knative-ha-webhook-reconcile` writes.
    #[arg(long = "reconcile", env = "KHW_RECONCILE")]
    pub enabled: bool,
    /// How often every governed namespace is reconciled, e.g. `10m`.
    #[arg(long = "reconcile-interval", env = "KHW_RECONCILE_INTERVAL",
          default_value = "10m", value_parser = crate::server::parse_duration)]
    pub interval: Duration,
    /// Only report drift (log lines, the drift metric); write nothing.
    #[arg(long = "reconcile-dry-run", env = "KHW_RECONCILE_DRY_RUN")]
    pub dry_run: bool,
    /// Also write pod template changes (anti-affinity, topology spread,
    /// --disable-ha), which roll the Deployment's pods. `false` leaves them
    /// out of the reconciler's patches.
    #[arg(long = "reconcile-pod-templates", env = "KHW_RECONCILE_POD_TEMPLATES",
          default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true", value_name = "BOOL")]
    pub pod_templates: bool,
    /// Writes per second at most.
    #[arg(long = "reconcile-rate", env = "KHW_RECONCILE_RATE", default_value_t = 5.0,
          value_parser = parse_rate)]
    pub rate: f64,
}

fn parse_rate(text: &str) -> Result<f64, String> {
    let rate: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("invalid rate {text:?}: expected writes per second, e.g. 5"))?;
    if !(rate.is_finite() && rate > 0.0) {
        return Err(format!("invalid rate {text:?}: must be more than 0"));
    }
    Ok(rate)
}

/// Everything the reconciler needs.
#[derive(Clone, Debug)]
pub struct ReconcileConfig {
    pub interval: Duration,
    pub dry_run: bool,
    pub pod_templates: bool,
    /// Writes per second at most.
    pub rate: f64,
    pub lease: LeaseConfig,
    /// How often the policy snapshot is checked for changes.
    pub poll: Duration,
    /// `--governed-namespaces`: no other namespace is ever read or written.
    pub governed: Governed,
}

impl ReconcileConfig {
    /// From the `serve` flags; `None` when `--reconcile` is off.
    /// `namespace` is the webhook's own namespace (`--webhook-namespace`), else the
    /// service account's.
    pub fn from_args(
        args: &ReconcileArgs,
        namespace: Option<&str>,
    ) -> Result<Option<ReconcileConfig>, ReconcileError> {
        if !args.enabled {
            return Ok(None);
        }
        let namespace =
            crate::sources::cluster::own_namespace(namespace).ok_or(ReconcileError::NoNamespace)?;
        Ok(Some(ReconcileConfig {
            interval: args.interval,
            dry_run: args.dry_run,
            pod_templates: args.pod_templates,
            rate: args.rate,
            lease: LeaseConfig {
                namespace,
                name: LEASE_NAME.to_string(),
                identity: lease::default_identity(),
                duration: Duration::from_secs(15),
                renew_every: Duration::from_secs(5),
            },
            poll: POLL_INTERVAL,
            governed: Governed::all(),
        }))
    }

    /// Restricts the reconciler to `governed`.
    pub fn governed(mut self, governed: Governed) -> ReconcileConfig {
        self.governed = governed;
        self
    }

    /// Short periods for tests (writes are still rate-limited by `rate`).
    pub fn for_tests(namespace: &str, identity: &str) -> ReconcileConfig {
        ReconcileConfig {
            interval: Duration::from_secs(3600),
            dry_run: false,
            pod_templates: true,
            rate: 1000.0,
            lease: LeaseConfig {
                namespace: namespace.to_string(),
                name: LEASE_NAME.to_string(),
                identity: identity.to_string(),
                duration: Duration::from_secs(5),
                renew_every: Duration::from_millis(200),
            },
            poll: Duration::from_millis(50),
            governed: Governed::all(),
        }
    }
}

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

/// Spaces writes out to at most `rate` per second.
#[derive(Debug)]
pub struct RateLimiter {
    every: Duration,
    next: Option<Instant>,
}

impl RateLimiter {
    pub fn new(rate: f64) -> RateLimiter {
        RateLimiter {
            every: Duration::from_secs_f64(1.0 / rate.max(1e-3)),
            next: None,
        }
    }

    pub async fn acquire(&mut self) {
        let now = Instant::now();
        let at = self.next.filter(|n| *n > now).unwrap_or(now);
        if at > now {
            tokio::time::sleep_until(at).await;
        }
        self.next = Some(at + self.every);
    }
}

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

fn context_for(snapshot_targets: Option<&BTreeSet<String>>, listed: &BTreeSet<String>) -> Context {
    let mut hpa_targets = listed.clone();
    if let Some(t) = snapshot_targets {
        hpa_targets.extend(t.iter().cloned());
    }
    Context { hpa_targets }
}

/// Brings one namespace in line. Errors listing the namespace end it;
/// per-object failures are recorded in `report`.
#[allow(clippy::too_many_arguments)]
pub async fn reconcile_namespace(
    client: &kube::Client,
    policy: &Policy,
    namespace: &str,
    snapshot_targets: Option<&BTreeSet<String>>,
    options: RunOptions,
    limiter: &mut RateLimiter,
    metrics: &ReconcileMetrics,
    may_write: &dyn MayWrite,
    report: &mut RunReport,
) -> Result<(), ReconcileError> {
    let listed = objects::list_namespace(client, namespace).await?;
    let ctx = context_for(snapshot_targets, &listed.hpa_targets);
    let mut drift: BTreeMap<&'static str, i64> = BTreeMap::new();
    for object in &listed.objects {
        let Some(kind) = Kind::of(object) else {
            continue;
        };
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let (result, left) = reconcile_object(
            client, policy, namespace, kind, &name, object, &ctx, options, limiter, metrics,
            may_write,
        )
        .await;
        if left {
            *drift.entry(kind.as_str()).or_default() += 1;
        }
        report
            .objects
            .insert((kind.as_str(), namespace.to_string(), name), result);
    }
    metrics.set_drift(namespace, &drift);
    Ok(())
}

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

/// One object: plan, write with a resourceVersion test, re-read and retry
/// on conflict. Returns the result and whether drift is left.
#[allow(clippy::too_many_arguments)]
async fn reconcile_object(
    client: &kube::Client,
    policy: &Policy,
    namespace: &str,
    kind: Kind,
    name: &str,
    listed: &Value,
    ctx: &Context,
    options: RunOptions,
    limiter: &mut RateLimiter,
    metrics: &ReconcileMetrics,
    may_write: &dyn MayWrite,
) -> (ObjectResult, bool) {
    let mut current = listed.clone();
    let mut last_error = String::new();
    for attempt in 1..=MAX_ATTEMPTS {
        if attempt > 1 {
            match objects::get(client, kind, namespace, name).await {
                Ok(Some(v)) => current = v,
                Ok(None) => {
                    tracing::info!(
                        kind = kind.as_str(),
                        namespace,
                        name,
                        "reconcile: object gone; skipped"
                    );
                    return (ObjectResult::Gone, false);
                }
                Err(e) => {
                    tracing::warn!(kind = kind.as_str(), namespace, name, error = %e, "reconcile: re-read failed");
                    metrics.write(kind, "error");
                    return (
                        ObjectResult::Failed {
                            error: e.to_string(),
                        },
                        true,
                    );
                }
            }
        }
        let drift = match plan::plan(policy, namespace, &current, ctx, options.pod_templates) {
            Ok(Some(d)) => d,
            Ok(None) => {
                tracing::debug!(kind = kind.as_str(), namespace, name, "reconcile: in line");
                return (ObjectResult::InLine, false);
            }
            Err(error) => {
                tracing::warn!(kind = kind.as_str(), namespace, name, error = %error,
                    "reconcile: the engine cannot handle this object; skipped");
                return (
                    ObjectResult::Failed {
                        error: error.to_string(),
                    },
                    true,
                );
            }
        };
        let changes = changes_text(&drift);
        if options.dry_run {
            tracing::info!(kind = kind.as_str(), namespace, name, changes = %changes,
                rolls_pods = drift.rolls_pods(), "reconcile: drift (dry run; not written)");
            return (ObjectResult::DryRun, true);
        }
        let Some(patch) = drift.guarded_patch() else {
            if drift.held_back > 0 {
                tracing::info!(kind = kind.as_str(), namespace, name, changes = %changes,
                    "reconcile: only pod template changes, left out by --reconcile-pod-templates=false; skipped");
                return (ObjectResult::SkippedPodTemplate, true);
            }
            tracing::warn!(
                kind = kind.as_str(),
                namespace,
                name,
                "reconcile: object has no resourceVersion; skipped"
            );
            return (
                ObjectResult::Failed {
                    error: "no metadata.resourceVersion".into(),
                },
                true,
            );
        };
        if !may_write.may_write() {
            return (ObjectResult::Abandoned, true);
        }
        limiter.acquire().await;
        if !may_write.may_write() {
            return (ObjectResult::Abandoned, true);
        }
        match objects::patch(client, kind, namespace, name, &patch).await {
            Ok(()) => {
                metrics.write(kind, "success");
                tracing::info!(kind = kind.as_str(), namespace, name, changes = %changes,
                    attempts = attempt, pod_template_ops_left_out = drift.held_back,
                    "reconcile: written");
                return (
                    ObjectResult::Written { attempts: attempt },
                    drift.held_back > 0,
                );
            }
            Err(e) if error::is_precondition_failed(&e) => {
                metrics.write(kind, "conflict");
                tracing::info!(kind = kind.as_str(), namespace, name, attempt, error = %e,
                    "reconcile: the object changed since it was read; reading it again");
                last_error = e.to_string();
            }
            Err(e) if error::is_not_found(&e) => {
                tracing::info!(
                    kind = kind.as_str(),
                    namespace,
                    name,
                    "reconcile: object gone; skipped"
                );
                return (ObjectResult::Gone, false);
            }
            Err(e) => {
                metrics.write(kind, "error");
                tracing::warn!(kind = kind.as_str(), namespace, name, error = %e, "reconcile: write failed");
                return (
                    ObjectResult::Failed {
                        error: e.to_string(),
                    },
                    true,
                );
            }
        }
    }
    tracing::warn!(kind = kind.as_str(), namespace, name, attempts = MAX_ATTEMPTS, error = %last_error,
        "reconcile: gave up after repeated conflicts; next run retries");
    (
        ObjectResult::Failed {
            error: format!("{MAX_ATTEMPTS} conflicting attempts: {last_error}"),
        },
        true,
    )
}

/// Reconciles the given namespaces of `snapshot` once (every governed
/// namespace when `namespaces` is None).
pub async fn reconcile_once(
    client: &kube::Client,
    snapshot: &Snapshot,
    namespaces: Option<&BTreeSet<String>>,
    options: RunOptions,
    limiter: &mut RateLimiter,
    metrics: &ReconcileMetrics,
    may_write: &dyn MayWrite,
) -> RunReport {
    let mut report = RunReport::default();
    for (namespace, policy) in &snapshot.policies {
        if namespaces.is_some_and(|n| !n.contains(namespace)) {
            continue;
        }
        if !may_write.may_write() && !options.dry_run {
            break;
        }
        if let Err(e) = reconcile_namespace(
            client,
            policy,
            namespace,
            snapshot.hpa_targets.get(namespace),
            options,
            limiter,
            metrics,
            may_write,
            &mut report,
        )
        .await
        {
            tracing::warn!(namespace = %namespace, error = %e, "reconcile: namespace failed");
            report.errors.push(e.to_string());
        }
    }
    metrics.run(report.ok());
    report
}

/// What a namespace was last reconciled against.
type Seen = BTreeMap<String, (Arc<Policy>, BTreeSet<String>)>;

fn seen(snapshot: &Snapshot) -> Seen {
    snapshot
        .policies
        .iter()
        .map(|(ns, p)| {
            (
                ns.clone(),
                (
                    p.clone(),
                    snapshot.hpa_targets.get(ns).cloned().unwrap_or_default(),
                ),
            )
        })
        .collect()
}

/// Namespaces whose policy or HPA targets differ between `before` and `now`
/// (and that still have a policy).
fn changed(before: &Seen, now: &Seen) -> BTreeSet<String> {
    now.iter()
        .filter(|(ns, (p, t))| {
            before
                .get(*ns)
                .is_none_or(|(bp, bt)| **bp != **p || bt != t)
        })
        .map(|(ns, _)| ns.clone())
        .collect()
}

/// The running reconciler.
pub struct Reconciler {
    client: kube::Client,
    config: ReconcileConfig,
    store: PolicyStore,
    metrics: ReconcileMetrics,
}

impl Reconciler {
    pub fn new(
        client: kube::Client,
        config: ReconcileConfig,
        store: PolicyStore,
        metrics: ReconcileMetrics,
    ) -> Reconciler {
        Reconciler {
            client,
            config,
            store,
            metrics,
        }
    }

    /// Runs until `stop` becomes true; then gives up the Lease.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let Reconciler {
            client,
            config,
            store,
            metrics,
        } = self;
        let (leader_tx, mut leader_rx) = watch::channel(false);
        let elector = lease::Elector::new(client.clone(), config.lease.clone());
        let election = tokio::spawn(elect(
            elector,
            config.lease.renew_every,
            leader_tx,
            metrics.clone(),
            stop.clone(),
        ));
        tracing::info!(
            identity = %config.lease.identity,
            lease = %format!("{}/{}", config.lease.namespace, config.lease.name),
            interval_s = config.interval.as_secs(),
            dry_run = config.dry_run,
            pod_templates = config.pod_templates,
            rate = config.rate,
            "reconciler starting"
        );
        let options = RunOptions {
            dry_run: config.dry_run,
            pod_templates: config.pod_templates,
        };
        let mut limiter = RateLimiter::new(config.rate);
        let mut poll = tokio::time::interval(config.poll);
        poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last: Option<Seen> = None;
        let mut next_full = Instant::now();
        loop {
            tokio::select! {
                _ = stop.wait_for(|s| *s) => break,
                r = leader_rx.changed() => {
                    if r.is_err() {
                        break;
                    }
                    // A new leader starts with a full run.
                    last = None;
                    continue;
                }
                _ = poll.tick() => {}
            }
            if !*leader_rx.borrow() {
                continue;
            }
            let snapshot = store.load();
            if !snapshot.synced {
                continue;
            }
            // Never outside --governed-namespaces, whatever the snapshot says.
            let mut now_seen = seen(&snapshot);
            now_seen.retain(|ns, _| config.governed.allows(ns));
            let full = last.is_none() || Instant::now() >= next_full;
            let namespaces = match (&last, full) {
                (Some(before), false) => changed(before, &now_seen),
                _ => now_seen.keys().cloned().collect(),
            };
            metrics.retain_namespaces(&|ns| now_seen.contains_key(ns));
            if namespaces.is_empty() {
                last = Some(now_seen);
                if full {
                    next_full = Instant::now() + config.interval;
                }
                continue;
            }
            tracing::info!(
                namespaces = %namespaces.iter().cloned().collect::<Vec<_>>().join(","),
                reason = if full { "full" } else { "policy changed" },
                "reconcile run starting"
            );
            let guard_leader = leader_rx.clone();
            let guard_stop = stop.clone();
            let may_write = move || *guard_leader.borrow() && !*guard_stop.borrow();
            let report = reconcile_once(
                &client,
                &snapshot,
                Some(&namespaces),
                options,
                &mut limiter,
                &metrics,
                &may_write,
            )
            .await;
            tracing::info!(
                objects = report.objects.len(),
                written = report.written(),
                ok = report.ok(),
                "reconcile run done"
            );
            last = Some(now_seen);
            let now = Instant::now();
            if full {
                next_full = now + config.interval;
            }
            if !report.ok() {
                next_full = next_full.min(now + RETRY_AFTER_ERROR);
            }
        }
        let _ = election.await;
        tracing::info!("reconciler stopped");
    }
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
    /// For `serve`: the reconciler when `config` is set, with its metrics
    /// registered in `registry`; reuses `client` (the cluster source's) or
    /// builds one from the usual kubeconfig. Errors say why no client.
    pub async fn prepare(
        config: Option<&ReconcileConfig>,
        client: Option<kube::Client>,
        store: &PolicyStore,
        registry: &mut prometheus_client::registry::Registry,
    ) -> Result<Option<Reconciler>, kube::Error> {
        let Some(config) = config else {
            return Ok(None);
        };
        let client = match client {
            Some(c) => c,
            None => kube::Client::try_default().await?,
        };
        let metrics = ReconcileMetrics::register(registry);
        Ok(Some(Reconciler::new(
            client,
            config.clone(),
            store.clone(),
            metrics,
        )))
    }

    /// Runs in a background task until [`RunningReconciler::stop`].
    pub fn spawn(self) -> RunningReconciler {
        let (stop, rx) = watch::channel(false);
        RunningReconciler {
            stop,
            task: tokio::spawn(self.run(rx)),
        }
    }
}

async fn elect(
    mut elector: lease::Elector,
    renew_every: Duration,
    leader_tx: watch::Sender<bool>,
    metrics: ReconcileMetrics,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let leading = match elector.round().await {
            Ok(lease::Round::Leader) => true,
            Ok(lease::Round::Follower { holder }) => {
                if *leader_tx.borrow() {
                    tracing::warn!(holder = %holder, "reconcile: lost the Lease");
                }
                false
            }
            Err(e) => {
                let valid = elector.still_valid();
                tracing::warn!(error = %e, still_leader = valid, "reconcile: Lease round failed");
                valid
            }
        };
        if leading && !*leader_tx.borrow() {
            tracing::info!(identity = %elector.identity(), "reconcile: acquired the Lease; this replica reconciles");
        }
        leader_tx.send_if_modified(|l| std::mem::replace(l, leading) != leading);
        metrics.leader.set(i64::from(leading));
        tokio::select! {
            _ = tokio::time::sleep(renew_every) => {}
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    leader_tx.send_replace(false);
    metrics.leader.set(0);
    match elector.release().await {
        Ok(true) => tracing::info!("reconcile: released the Lease"),
        Ok(false) => {}
        Err(e) => tracing::warn!(error = %e, "reconcile: releasing the Lease failed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        r: ReconcileArgs,
    }

    fn parse(args: &[&str]) -> Result<ReconcileArgs, String> {
        Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied()))
            .map(|c| c.r)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn flags_and_defaults() {
        let d = parse(&[]).unwrap();
        assert!(!d.enabled && !d.dry_run && d.pod_templates);
        assert_eq!(d.interval, Duration::from_secs(600));
        assert_eq!(d.rate, 5.0);
        type Check = fn(&ReconcileArgs) -> bool;
        let cases: &[(&str, &[&str], Check)] = &[
            ("enabled", &["--reconcile"], |a| a.enabled),
            ("dry run", &["--reconcile-dry-run"], |a| a.dry_run),
            (
                "pod templates off",
                &["--reconcile-pod-templates=false"],
                |a| !a.pod_templates,
            ),
            (
                "pod templates bare flag",
                &["--reconcile-pod-templates"],
                |a| a.pod_templates,
            ),
            ("interval", &["--reconcile-interval", "1m30s"], |a| {
                a.interval == Duration::from_secs(90)
            }),
            ("rate", &["--reconcile-rate", "0.5"], |a| a.rate == 0.5),
        ];
        for (what, args, check) in cases {
            let a = parse(args).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(check(&a), "{what}: {a:?}");
        }
        for bad in [
            &["--reconcile-rate", "0"][..],
            &["--reconcile-rate", "-1"],
            &["--reconcile-rate", "fast"],
            &["--reconcile-interval", "10"],
            &["--reconcile-pod-templates=maybe"],
        ] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn config_needs_a_namespace_only_when_enabled() {
        let off = parse(&[]).unwrap();
        assert!(ReconcileConfig::from_args(&off, None).unwrap().is_none());
        let on = parse(&["--reconcile", "--reconcile-dry-run"]).unwrap();
        let c = ReconcileConfig::from_args(&on, Some("khw"))
            .unwrap()
            .expect("enabled");
        assert_eq!(c.lease.namespace, "khw");
        assert_eq!(c.lease.name, LEASE_NAME);
        assert!(c.dry_run);
        if !std::path::Path::new(crate::sources::cluster::SA_NAMESPACE_FILE).exists() {
            assert!(matches!(
                ReconcileConfig::from_args(&on, None),
                Err(ReconcileError::NoNamespace)
            ));
        }
    }

    fn policy(ns: &str, replicas: i32) -> Arc<Policy> {
        Arc::new(Policy {
            name: "p".into(),
            spec: crate::policy::HighAvailabilityPolicySpec {
                target_namespace: ns.into(),
                replicas: Some(replicas),
                ..Default::default()
            },
        })
    }

    #[test]
    fn changed_namespaces() {
        let before: Seen = [
            ("a".to_string(), (policy("a", 3), BTreeSet::new())),
            ("b".to_string(), (policy("b", 3), BTreeSet::new())),
            ("c".to_string(), (policy("c", 3), BTreeSet::new())),
        ]
        .into();
        let mut now = before.clone();
        now.insert("a".into(), (policy("a", 4), BTreeSet::new()));
        now.insert("b".into(), (policy("b", 3), ["x".to_string()].into()));
        now.insert("d".into(), (policy("d", 3), BTreeSet::new()));
        now.remove("c");
        let got: Vec<String> = changed(&before, &now).into_iter().collect();
        assert_eq!(got, vec!["a", "b", "d"]);
        assert!(changed(&now, &now).is_empty());
    }
}
