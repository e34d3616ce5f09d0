//! client-go's leader election timing rules, which a policy's durations
//! (and the ConfigMap they are written to) must keep.

/// A rule of client-go's `leaderelection.NewLeaderElector`, which Knative
/// runs on `config-leader-election`; a broken rule makes every
/// leader-elected Knative process exit at start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimingRule {
    /// leaseDuration must be greater than renewDeadline.
    LeaseAboveRenew,
    /// renewDeadline must be greater than 1.2 x retryPeriod (JitterFactor).
    RenewAboveJitteredRetry,
}

impl TimingRule {
    /// Indices (0 lease, 1 renew, 2 retry) of the two durations compared.
    pub fn fields(self) -> (usize, usize) {
        match self {
            TimingRule::LeaseAboveRenew => (0, 1),
            TimingRule::RenewAboveJitteredRetry => (1, 2),
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
    out
}

/// Nanoseconds in the largest exact unit: `12s`, `1500ms`, `7ns`.
pub fn format_ns(ns: u128) -> String {
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
