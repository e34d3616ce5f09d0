//! Issue 10: `check` (policy validation) rejects what would crash, split
//! or block Knative, with the exact message.

use knative_ha_webhook::policy::Policy;

fn errors(spec: &str) -> Vec<String> {
    let text = format!(
        "apiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\nmetadata: {{name: p}}\nspec:\n  targetNamespace: knative-serving\n{spec}"
    );
    match Policy::from_yaml(&text) {
        Ok(_) => Vec::new(),
        Err(e) => e.flatten().iter().map(ToString::to_string).collect(),
    }
}

const JITTER: &str = "(client-go's JitterFactor; its leader election refuses to start otherwise)";
const BLOCKS: &str =
    "allows no voluntary disruption, so every node drain and cluster upgrade would block";

#[test]
fn leader_election_timings_follow_client_go() {
    let cases: Vec<(&str, String)> = vec![
        (
            "  leaderElection: {leaseDuration: 60s, renewDeadline: 11s, retryPeriod: 10s}\n",
            format!("spec.leaderElection.renewDeadline: renewDeadline \"11s\" must be greater than retryPeriod \"10s\" x 1.2 = 12s {JITTER}"),
        ),
        (
            "  leaderElection: {leaseDuration: 20s, renewDeadline: 19s, retryPeriod: 16s}\n",
            format!("spec.leaderElection.renewDeadline: renewDeadline \"19s\" must be greater than retryPeriod \"16s\" x 1.2 = 19200ms {JITTER}"),
        ),
        (
            "  leaderElection: {retryPeriod: 35s}\n",
            format!("spec.leaderElection.retryPeriod: renewDeadline (default \"40s\") must be greater than retryPeriod \"35s\" x 1.2 = 42s {JITTER}"),
        ),
        (
            "  leaderElection: {leaseDuration: 40s}\n",
            "spec.leaderElection.leaseDuration: leaseDuration \"40s\" must be greater than renewDeadline (default \"40s\") (client-go leader election refuses to start otherwise)".to_string(),
        ),
    ];
    for (spec, want) in cases {
        assert_eq!(errors(spec), vec![want], "{spec}");
    }
    // Knative's defaults and a tight valid set pass.
    assert!(
        errors("  leaderElection: {leaseDuration: 60s, renewDeadline: 40s, retryPeriod: 10s}\n")
            .is_empty()
    );
    assert!(errors("  leaderElection: {renewDeadline: 13s, retryPeriod: 10s}\n").is_empty());
}

#[test]
fn pod_disruption_budgets_must_allow_a_disruption() {
    let cases: Vec<(&str, String)> = vec![
        (
            "  podDisruptionBudget: {maxUnavailable: 0}\n",
            format!("spec.podDisruptionBudget.maxUnavailable: 0 {BLOCKS}; use at least 1"),
        ),
        (
            "  podDisruptionBudget: {maxUnavailable: \"0%\"}\n",
            format!("spec.podDisruptionBudget.maxUnavailable: \"0%\" {BLOCKS}; use at least 1"),
        ),
        (
            "  podDisruptionBudget: {minAvailable: \"100%\"}\n",
            format!("spec.podDisruptionBudget.minAvailable: \"100%\" {BLOCKS}"),
        ),
        (
            "  replicas: 3\n  podDisruptionBudget: {minAvailable: 3}\n",
            format!("spec.podDisruptionBudget.minAvailable: 3 with 3 replicas (spec.replicas) {BLOCKS}; it must stay below 3"),
        ),
        (
            "  replicas: 3\n  workloads:\n  - {name: activator, replicas: 2}\n  podDisruptionBudget: {minAvailable: \"80%\"}\n",
            format!("spec.podDisruptionBudget.minAvailable: \"80%\" (rounds up to 2) with 2 replicas (spec.workloads[0].replicas) {BLOCKS}; it must stay below 2"),
        ),
        (
            "  replicas: 3\n  workloads:\n  - name: activator\n    podDisruptionBudget: {minAvailable: 5}\n",
            format!("spec.workloads[0].podDisruptionBudget.minAvailable: 5 with 3 replicas (spec.replicas) {BLOCKS}; it must stay below 3"),
        ),
        (
            "  workloads:\n  - name: activator\n    podDisruptionBudget: {minAvailable: 1, maxUnavailable: 1}\n",
            "spec.workloads[0].podDisruptionBudget: set exactly one of minAvailable and maxUnavailable, got both".to_string(),
        ),
    ];
    for (spec, want) in cases {
        assert_eq!(errors(spec), vec![want], "{spec}");
    }
    assert!(errors("  replicas: 3\n  podDisruptionBudget: {minAvailable: 2}\n").is_empty());
    assert!(errors("  replicas: 5\n  podDisruptionBudget: {minAvailable: \"80%\"}\n").is_empty());
}
