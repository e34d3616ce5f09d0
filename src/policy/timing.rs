//! client-go's leader election timing rules, which a policy's durations
//! (and the ConfigMap they are written to) must keep.

/// A rule of client-go's `leaderelection.NewLeaderElector`, which Knative
/// runs on `config-leader-election`; a broken rule makes every
/// leader-elected Knative process exit at start. [`TimingRule::message`]
/// says each rule and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimingRule {
    LeaseAboveRenew,
    RenewAboveJitteredRetry,
    LeaseWholeSeconds,
    LeaseAtMost,
}

/// The longest lease a policy or `config-leader-election` may set, in
/// seconds (10 minutes: ten times Knative's default of 60s). Within
/// `leaseDurationSeconds`' int32 with room to spare.
const MAX_LEASE_SECONDS: u128 = 600;

const SECOND_NS: u128 = 1_000_000_000;

impl TimingRule {
    /// Indices (0 lease, 1 renew, 2 retry) of the two durations compared.
    pub fn fields(self) -> (usize, usize) {
        match self {
            TimingRule::LeaseAboveRenew => (0, 1),
            TimingRule::RenewAboveJitteredRetry => (1, 2),
            TimingRule::LeaseWholeSeconds | TimingRule::LeaseAtMost => (0, 0),
        }
    }

    /// `a` and `b` are the two durations as shown to the user
    /// (`renewDeadline "11s"`); `retry_ns` is the retry period.
    pub fn message(self, a: &str, b: &str, retry_ns: u128) -> String {
        match self {
            TimingRule::LeaseAboveRenew => format!(
                "{a} must be greater than {b} (client-go leader election refuses to start otherwise)"
            ),
            TimingRule::RenewAboveJitteredRetry => format!(
                "{a} must be greater than {b} x 1.2 = {} (client-go's JitterFactor; its leader election refuses to start otherwise)",
                format_ns(retry_ns * 6 / 5)
            ),
            TimingRule::LeaseWholeSeconds => format!(
                "{a} must be a whole number of seconds, at least 1s (the Lease API stores leaseDurationSeconds, whole seconds above 0, and client-go writes it as leaseDuration / 1s rounded down: every Lease would be refused and no replica would ever lead)"
            ),
            TimingRule::LeaseAtMost => format!(
                "{a} must be at most {MAX_LEASE_SECONDS}s (after a leader crashes, its keys have no leader for the whole lease duration)"
            ),
        }
    }
}

/// The rules client-go checks before it starts a leader elector.
pub fn broken_timing_rules(lease: u128, renew: u128, retry: u128) -> Vec<TimingRule> {
    let mut out = Vec::new();
    if lease <= renew {
        out.push(TimingRule::LeaseAboveRenew);
    }
    // renew > 1.2 * retry, in integers.
    if renew * 5 <= retry * 6 {
        out.push(TimingRule::RenewAboveJitteredRetry);
    }
    if lease < SECOND_NS || !lease.is_multiple_of(SECOND_NS) {
        out.push(TimingRule::LeaseWholeSeconds);
    } else if lease > MAX_LEASE_SECONDS * SECOND_NS {
        out.push(TimingRule::LeaseAtMost);
    }
    out
}

/// Nanoseconds in the largest exact unit: `12s`, `1500ms`, `7ns`.
fn format_ns(ns: u128) -> String {
    if ns.is_multiple_of(1_000_000_000) {
        format!("{}s", ns / 1_000_000_000)
    } else if ns.is_multiple_of(1_000_000) {
        format!("{}ms", ns / 1_000_000)
    } else if ns.is_multiple_of(1_000) {
        format!("{}us", ns / 1_000)
    } else {
        format!("{ns}ns")
    }
}
