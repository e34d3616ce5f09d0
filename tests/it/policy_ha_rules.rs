//! `check` (policy validation) rejects what would crash, split
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

/// The Lease API refuses `leaseDurationSeconds` below 1 and client-go writes
/// it as the duration in whole seconds rounded down: these durations pass
/// Knative's parser and client-go's ordering rules, yet no replica could
/// ever hold a Lease (or, for the long ones, fail over after a crash).
#[test]
fn lease_durations_the_lease_api_refuses_or_that_never_fail_over() {
    let whole = "must be a whole number of seconds, at least 1s (the Lease API stores leaseDurationSeconds, whole seconds above 0, and client-go writes it as leaseDuration / 1s rounded down: every Lease would be refused and no replica would ever lead)";
    let long = "must be at most 600s (after a leader crashes, its keys have no leader for the whole lease duration)";
    for (spec, want) in [
        (
            "  leaderElection: {leaseDuration: 900ms, renewDeadline: 800ms, retryPeriod: 100ms}\n",
            format!("spec.leaderElection.leaseDuration: leaseDuration \"900ms\" {whole}"),
        ),
        (
            "  leaderElection: {leaseDuration: 1500ms, renewDeadline: 1s, retryPeriod: 100ms}\n",
            format!("spec.leaderElection.leaseDuration: leaseDuration \"1500ms\" {whole}"),
        ),
        (
            "  leaderElection: {leaseDuration: 3ns, renewDeadline: 2ns, retryPeriod: 1ns}\n",
            format!("spec.leaderElection.leaseDuration: leaseDuration \"3ns\" {whole}"),
        ),
        (
            "  leaderElection: {leaseDuration: 600000h}\n",
            format!("spec.leaderElection.leaseDuration: leaseDuration \"600000h\" {long}"),
        ),
        (
            "  leaderElection: {leaseDuration: 2562047h}\n",
            format!("spec.leaderElection.leaseDuration: leaseDuration \"2562047h\" {long}"),
        ),
    ] {
        assert_eq!(errors(spec), vec![want], "{spec}");
    }
    assert!(errors("  leaderElection: {leaseDuration: 10m, renewDeadline: 40s}\n").is_empty());
    assert!(
        errors("  leaderElection: {leaseDuration: 2s, renewDeadline: 1s, retryPeriod: 500ms}\n")
            .is_empty()
    );
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

/// A budget is judged against the replicas the output
/// really runs; with no replicas in the policy that is what Knative ships
/// (the activator and webhook HPAs keep minReplicas 1).
#[test]
fn pod_disruption_budgets_are_judged_at_the_replicas_knative_runs_without_a_policy_count() {
    let shipped =
        "spec.replicas unset: Knative ships 1, the activator and webhook HPAs' minReplicas";
    let cases: Vec<(&str, String)> = vec![
        (
            "  podDisruptionBudget: {minAvailable: \"99%\"}\n",
            format!(
                "spec.podDisruptionBudget.minAvailable: \"99%\" (rounds up to 1) with 1 replica ({shipped}) {BLOCKS}; it must stay below 1"
            ),
        ),
        (
            "  podDisruptionBudget: {minAvailable: 1}\n",
            format!(
                "spec.podDisruptionBudget.minAvailable: 1 with 1 replica ({shipped}) {BLOCKS}; it must stay below 1"
            ),
        ),
        (
            "  workloads:\n  - name: activator\n    podDisruptionBudget: {minAvailable: 2}\n",
            format!(
                "spec.workloads[0].podDisruptionBudget.minAvailable: 2 with 1 replica (spec.workloads[0].replicas and spec.replicas unset: Knative ships 1 for activator) {BLOCKS}; it must stay below 1"
            ),
        ),
        // A workload override without its own budget does not lift the
        // Deployments the policy leaves at what Knative ships.
        (
            "  workloads:\n  - {name: activator, replicas: 5}\n  podDisruptionBudget: {minAvailable: 2}\n",
            format!(
                "spec.podDisruptionBudget.minAvailable: 2 with 1 replica ({shipped}) {BLOCKS}; it must stay below 1"
            ),
        ),
    ];
    for (spec, want) in cases {
        assert_eq!(errors(spec), vec![want], "{spec}");
    }
    for ok in [
        "  podDisruptionBudget: {maxUnavailable: 1}\n",
        "  podDisruptionBudget: {maxUnavailable: \"10%\"}\n",
        "  podDisruptionBudget: {minAvailable: 0}\n",
        "  workloads:\n  - name: activator\n    replicas: 3\n    podDisruptionBudget: {minAvailable: 2}\n",
        "  replicas: 2\n  workloads:\n  - name: activator\n    podDisruptionBudget: {minAvailable: 1}\n",
    ] {
        assert_eq!(errors(ok), Vec::<String>::new(), "{ok}");
    }
}

/// eventing-controller scales `pingsource-mt-adapter`
/// 0 <-> 1, so replicas for it are never applied and a budget sees one pod.
#[test]
fn pingsource_mt_adapter_replicas_and_blocking_budgets_are_refused() {
    let why = "pingsource-mt-adapter runs 0 or 1: eventing-controller scales it on demand, never to the policy's replicas";
    assert_eq!(
        errors("  workloads:\n  - {name: pingsource-mt-adapter, replicas: 3}\n"),
        vec![format!(
            "spec.workloads[0].replicas: {why}, so this is never applied; remove it, got 3"
        )]
    );
    assert_eq!(
        errors(
            "  replicas: 3\n  workloads:\n  - name: pingsource-mt-adapter\n    podDisruptionBudget: {minAvailable: 1}\n"
        ),
        vec![format!(
            "spec.workloads[0].podDisruptionBudget.minAvailable: 1 with 1 replica ({why}) {BLOCKS}; it must stay below 1"
        )]
    );
    assert!(
        errors("  replicas: 3\n  workloads:\n  - name: pingsource-mt-adapter\n    podDisruptionBudget: {maxUnavailable: 1}\n")
            .is_empty()
    );
}
