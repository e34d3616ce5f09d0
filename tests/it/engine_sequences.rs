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

const NS: &str = "knative-serving";
const DEPLOYMENTS: &[&str] = &[
    "activator",
    "autoscaler",
    "controller",
    "webhook",
    "autoscaler-hpa",
    "net-kourier-controller",
];
const HPA_BACKED: &[&str] = &["activator", "webhook"];

fn arb_policy() -> impl Strategy<Value = Policy> {
    (
        prop::option::of(1..=4i32),
        prop::option::of(any::<bool>()),
        prop::option::of((
            prop::sample::select(vec!["Preferred", "Required", "None"]),
            prop::sample::select(vec![
                "kubernetes.io/hostname",
                "topology.kubernetes.io/zone",
            ]),
        )),
    )
        .prop_map(|(replicas, enabled, aa)| {
            support::serving_policy(&support::generated_spec(enabled, "", replicas, aa))
        })
}

fn mutate(policy: &Policy, object: &Value) -> Value {
    let ctx = support::corpus::hpa_context();
    let out = engine::mutate_object(
        policy,
        &Input {
            operation: Operation::Update,
            namespace: NS,
            object,
        },
        &ctx,
    )
    .expect("engine");
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
        policies in prop::collection::vec(arb_policy(), 2..=3),
        name in prop::sample::select(DEPLOYMENTS.to_vec()),
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

/// A budget setting as policy YAML.
fn arb_budget() -> impl Strategy<Value = Option<String>> {
    prop::option::of(prop::sample::select(vec![
        "{minAvailable: 0}",
        "{minAvailable: 1}",
        "{minAvailable: 2}",
        "{minAvailable: 3}",
        "{minAvailable: \"50%\"}",
        "{minAvailable: \"80%\"}",
        "{maxUnavailable: 1}",
        "{maxUnavailable: \"25%\"}",
    ]))
    .prop_map(|b| b.map(String::from))
}

/// Policies that raise the HPA-backed Deployments or not, with budgets
/// globally and for the activator; a policy `check` refuses loses its
/// budgets (as a user would have to).
fn arb_budget_policy() -> impl Strategy<Value = Policy> {
    (
        prop::option::of(1..=4i32),
        arb_budget(),
        prop::option::of((prop::option::of(1..=4i32), arb_budget())),
    )
        .prop_map(|(replicas, global, activator)| {
            let text = |with_budgets: bool| {
                let mut spec = String::new();
                if let Some(r) = replicas {
                    spec.push_str(&format!("  replicas: {r}\n"));
                }
                if let Some(b) = global.as_ref().filter(|_| with_budgets) {
                    spec.push_str(&format!("  podDisruptionBudget: {b}\n"));
                }
                if let Some((r, b)) = &activator {
                    spec.push_str("  workloads:\n  - name: activator\n");
                    if let Some(r) = r {
                        spec.push_str(&format!("    replicas: {r}\n"));
                    }
                    if let Some(b) = b.as_ref().filter(|_| with_budgets) {
                        spec.push_str(&format!("    podDisruptionBudget: {b}\n"));
                    }
                }
                support::serving_policy_yaml(&spec)
            };
            Policy::from_yaml(&text(true))
                .or_else(|_| Policy::from_yaml(&text(false)))
                .expect("generated policy is valid")
        })
}

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
        policies in prop::collection::vec(arb_budget_policy(), 2..=4),
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
