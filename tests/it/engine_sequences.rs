//! Properties over random sequences of two or three policies
//! applied one after another to the real v1.23.0 Deployments:
//! - a Deployment carries `--disable-ha` only with exactly one replica and
//!   no HPA scaling it;
//! - an anti-affinity term the policy did not create is never removed.

use crate::support;

use knative_ha_webhook::engine::{self, Input, Operation, affinity};
use knative_ha_webhook::policy::Policy;
use proptest::prelude::*;
use serde_json::Value;
use support::policygen::{self, AntiAffinity, Budgets, LeaderElection, Shape, Workloads};

const NS: &str = "knative-serving";
const HPA_BACKED: &[&str] = &["activator", "webhook"];

/// The settings that decide `--disable-ha` and anti-affinity.
const SHAPE: Shape = Shape {
    namespaces: &[NS],
    replicas: Some(1..=4),
    leader_election: Some(LeaderElection {
        buckets: 2..=2,
        durations: &[policygen::NO_DURATIONS],
    }),
    anti_affinity: Some(AntiAffinity {
        keys: &[policygen::HOSTNAME, policygen::ZONE],
    }),
    spread: None,
    budgets: None,
    priority_classes: &[],
    workloads: policygen::NO_WORKLOADS,
    operator_owned: false,
};

fn mutate(policy: &Policy, object: &Value) -> Value {
    let input = Input {
        operation: Operation::Update,
        namespace: NS,
        object,
    };
    let known = support::corpus::governing(policy);
    let out = engine::outcome(engine::Answering::Governed(&known), &input).expect("engine");
    out.object.unwrap_or_else(|| object.clone())
}

fn has_flag(d: &Value) -> bool {
    d["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["args"].as_array())
        .flatten()
        .any(|a| a == "--disable-ha")
}

/// The unmarked anti-affinity terms, per list.
fn foreign_terms(d: &Value) -> Vec<(String, Value)> {
    let aa = &d["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"];
    [affinity::REQUIRED, affinity::PREFERRED]
        .iter()
        .flat_map(|list| {
            aa[*list]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|t| !affinity::is_marked(list, t))
                .map(|t| (list.to_string(), t))
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn disable_ha_only_on_one_non_hpa_replica_and_foreign_terms_stay(
        policies in prop::collection::vec(policygen::arb_policy(&SHAPE), 2..=3),
        name in prop::sample::select(policygen::DEPLOYMENTS.to_vec()),
        start_with_flag in any::<bool>(),
    ) {
        let mut d = support::fixture("Deployment", NS, name);
        if start_with_flag {
            d["spec"]["template"]["spec"]["containers"][0]["args"] = serde_json::json!(["--disable-ha"]);
        }
        let shipped = foreign_terms(&d);
        for p in &policies {
            d = mutate(p, &d);
            let replicas = d["spec"]["replicas"].as_i64().unwrap_or(1);
            if has_flag(&d) {
                prop_assert!(replicas == 1 && !HPA_BACKED.contains(&name), "{name}: flag with {replicas} replicas");
            }
            let now = foreign_terms(&d);
            for term in &shipped {
                prop_assert!(now.contains(term), "{name}: {term:?} removed");
            }
        }
    }
}

/// Policies that raise the HPA-backed Deployments or not, with budgets
/// globally and for the activator.
const BUDGET_SHAPE: Shape = Shape {
    namespaces: &[NS],
    replicas: Some(1..=4),
    leader_election: None,
    anti_affinity: None,
    spread: None,
    budgets: Some(Budgets {
        ints: 0..=3,
        percents: Some(25..=80),
        per_workload: true,
    }),
    priority_classes: &[],
    workloads: Workloads {
        names: &["activator"],
        most: 1,
        exclude: 0,
    },
    operator_owned: false,
};

/// The budget fields of a PDB.
fn budget(pdb: &Value) -> Vec<(String, Value)> {
    ["minAvailable", "maxUnavailable"]
        .iter()
        .filter_map(|f| Some((f.to_string(), pdb["spec"].get(*f)?.clone())))
        .collect()
}

/// The disruptions a budget allows with `replicas` pods (percentages round
/// up, as in Kubernetes' disruption controller).
fn allowed(budget: &[(String, Value)], replicas: i64) -> i64 {
    let (field, value) = &budget[0];
    let resolved = match value {
        Value::String(s) => {
            let p: i64 = s.trim_end_matches('%').parse().unwrap();
            (p * replicas + 99) / 100
        }
        v => v.as_i64().unwrap(),
    };
    if field == "minAvailable" {
        replicas - resolved
    } else {
        resolved.min(replicas)
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// After every policy of a sequence, no budget the
    /// engine wrote allows zero disruptions at the replicas that really
    /// run (the HPA's minReplicas, through the same sequence).
    #[test]
    fn no_budget_the_engine_wrote_blocks_drains_at_what_runs(
        policies in prop::collection::vec(policygen::arb_policy(&BUDGET_SHAPE), 2..=4),
        name in prop::sample::select(HPA_BACKED.to_vec()),
    ) {
        let mut hpa = support::fixture("HorizontalPodAutoscaler", NS, name);
        let shipped = support::fixture("PodDisruptionBudget", NS, &format!("{name}-pdb"));
        let mut pdb = shipped.clone();
        for (i, p) in policies.iter().enumerate() {
            hpa = mutate(p, &hpa);
            pdb = mutate(p, &pdb);
            let runs = hpa["spec"]["minReplicas"].as_i64().unwrap();
            let now = budget(&pdb);
            if now != budget(&shipped) {
                prop_assert!(
                    allowed(&now, runs) > 0,
                    "{name} after policy {i}: {now:?} with {runs} replicas\n{:#?}",
                    policies.iter().map(|p| &p.spec).collect::<Vec<_>>()
                );
            }
        }
    }
}
