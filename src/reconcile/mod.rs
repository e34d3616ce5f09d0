//! Bringing existing objects in line: the reconciler (`serve --reconcile`)
//! and drift reports (`knative-ha-webhook audit`).
//!
//! An admission webhook only sees writes. The reconciler also applies the
//! policy to what already runs: when a policy becomes effective or changes
//! (it polls the [`PolicyStore`](crate::store::PolicyStore) snapshot and
//! compares policies and HPA targets per namespace), and every
//! `--reconcile-interval`, the replica holding the Lease
//! `knative-ha-webhook-reconcile` lists the governed kinds of each governed
//! namespace, runs the engine (operation UPDATE) and sends each non-empty
//! patch as a JSON patch that starts with a `test` of
//! `metadata.resourceVersion`. A concurrent writer makes that test fail
//! (or the API server answer 409): the object is read again and the patch
//! recomputed, at most [`MAX_ATTEMPTS`] times. The write passes through the
//! webhook, which computes an empty patch (the engine is idempotent), so
//! one write converges.
//!
//! - [`reconciler`]: the running reconciler; [`schedule`]: which
//!   namespaces are due; [`lease`]: leader election.
//! - [`run`]: one run over some namespaces, object by object, paced by
//!   [`rate`], told in a [`report`]; [`plan`]: pure drift computation
//!   (which changes roll pods);
//!   [`objects`]: list/get/patch of governed objects.
//! - [`metrics`]: the reconcile metrics. [`audit`]: the `audit` command.

pub mod audit;
mod error;
pub mod lease;
pub mod metrics;
pub mod objects;
pub mod plan;
pub mod rate;
pub mod reconciler;
pub mod report;
pub mod run;
pub mod schedule;

use std::time::Duration;

pub use error::{ReconcileError, Result};
pub use lease::{LEASE_NAME, LeaseConfig};
pub use metrics::ReconcileMetrics;
pub use plan::{ChangeLine, Drift};
pub use rate::RateLimiter;
pub use reconciler::{Reconciler, RunningReconciler};
pub use report::{ObjectResult, RunReport};
pub use run::{MAX_ATTEMPTS, MayWrite, RunOptions, reconcile_once};
pub use schedule::RETRY_AFTER_ERROR;

use crate::sources::Governed;

/// How often the policy snapshot is checked for changes.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

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
}
