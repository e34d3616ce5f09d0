//! Issue 10: properties over random sequences of two or three policies
//! applied one after another to the real v1.23.0 Deployments:
//! - a Deployment carries `--disable-ha` only with exactly one replica and
//!   no HPA scaling it;
//! - an anti-affinity term the policy did not create is never removed.

mod support;

use std::collections::BTreeSet;

use knative_ha_webhook::engine::{self, Context, Input, Operation, affinity};
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
            prop::sample::select(vec!["kubernetes.io/hostname", "topology.kubernetes.io/zone"]),
        )),
    )
        .prop_map(|(replicas, enabled, aa)| {
            let mut spec = String::new();
            match enabled {
                Some(false) => spec.push_str("  leaderElection: {enabled: false}\n"),
                Some(true) => spec.push_str("  leaderElection: {enabled: true, buckets: 2}\n"),
                None => {}
            }
            if let Some(r) = replicas.filter(|_| enabled != Some(false)) {
                spec.push_str(&format!("  replicas: {r}\n"));
            }
            if let Some((kind, key)) = aa {
                spec.push_str(&format!("  podAntiAffinity: {{type: {kind}, topologyKey: {key}}}\n"));
            }
            let text = format!(
                "apiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\nmetadata: {{name: p}}\nspec:\n  targetNamespace: {NS}\n{spec}"
            );
            Policy::from_yaml(&text).expect("generated policy is valid")
        })
}

fn mutate(policy: &Policy, object: &Value) -> Value {
    let ctx = Context {
        hpa_targets: BTreeSet::from(["activator".to_string(), "webhook".to_string()]),
    };
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
