//! Bringing existing objects in line: the reconciler (`serve --reconcile`),
//! drift reports (`audit`) and `restore`; docs/reconcile.md tells when and
//! how they write.
//!
//! - [`reconciler`]: the running reconciler; [`schedule`]: which
//!   namespaces are due; [`lease`]: leader election.
//! - [`run`]: one pass over some namespaces, object by object, paced by
//!   [`rate`], told in a [`report`] and in one Event per write ([`events`]);
//!   [`plan`]: pure drift computation (which changes roll pods);
//!   [`objects`]: list/get/patch of governed objects, each field a write
//!   took from another manager handed back to it ([`ownership`]).
//! - [`metrics`]: the reconcile metrics. [`audit`]: the `audit` command.
//!   [`restore`]: the `restore` command (the release values back).

pub mod audit;
pub mod budgets;
pub mod coverage;
mod error;
pub mod events;
pub mod lease;
pub mod metrics;
pub mod objects;
pub mod ownership;
pub mod plan;
pub mod rate;
pub mod reconciler;
pub mod report;
pub mod restore;
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
pub use run::{MayWrite, Pass, RunOptions};
pub use schedule::RETRY_AFTER_ERROR;

use crate::scope::AllowedNamespaces;

/// How often the policy snapshot is checked for changes.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// How often the leader reads the Knative Operator's resources between
/// passes: an edit of a KnativeServing's or KnativeEventing's HA values
/// reaches the policy's `status.operatorOverrides` within this.
pub const OPERATOR_CHECK_INTERVAL: Duration = Duration::from_secs(15);

/// Everything the reconciler needs (the `--reconcile-*` flags).
#[derive(Clone, Debug)]
pub struct ReconcileConfig {
    pub interval: Duration,
    pub dry_run: bool,
    pub pod_templates: bool,
    /// Writes per second at most.
    pub rate: f64,
    pub lease: LeaseConfig,
    /// [`POLL_INTERVAL`] outside tests.
    pub poll: Duration,
    /// [`OPERATOR_CHECK_INTERVAL`] outside tests.
    pub operator_check: Duration,
    /// [`schedule::SETTLE`] outside tests.
    pub settle: Duration,
    /// `--governed-namespaces`: no other namespace is ever read or written.
    pub governed: AllowedNamespaces,
    /// `--undo-unclaimed`: one restore pass over a namespace whose policy
    /// was deleted ([`Pass::restore`]).
    pub undo_unclaimed: bool,
}

impl ReconcileConfig {
    /// Restricts the reconciler to `governed`.
    pub fn governed(mut self, governed: AllowedNamespaces) -> ReconcileConfig {
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
            operator_check: Duration::from_millis(200),
            settle: Duration::from_millis(300),
            governed: AllowedNamespaces::all(),
            undo_unclaimed: false,
        }
    }
}
