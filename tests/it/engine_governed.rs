//! Which objects a policy governs: Knative's own (the Deployments its
//! releases ship, their HPAs and PDBs, `config-leader-election`) and the
//! Deployments a policy names in `workloads`; a user's own objects in the
//! same namespace are left alone.

use crate::support;
use support::{mutate_checked, serving_policy as policy};

use knative_ha_webhook::engine::Operation;
use serde_json::{Value, json};

const NS: &str = "knative-serving";

fn run(p: &knative_ha_webhook::policy::Policy, object: &Value) -> (Value, Vec<String>) {
    mutate_checked(p, NS, Operation::Create, object)
}

fn users_deployment(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": name, "namespace": NS},
           "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                                 "spec": {"containers": [{"name": name, "image": "registry.k8s.io/pause:3.10"}]}}}})
}

const EVERYTHING: &str = "  replicas: 3\n  podAntiAffinity: {type: Required}\n  topologySpreadConstraints: [{topologyKey: topology.kubernetes.io/zone}]\n  podDisruptionBudget: {minAvailable: 2}\n  priorityClassName: knative-control-plane\n";

#[test]
fn a_users_own_objects_in_the_namespace_are_left_alone() {
    let p = policy(EVERYTHING);
    let app = users_deployment("my-app");
    assert_eq!(run(&p, &app), (app.clone(), Vec::new()));
    // A StatefulSet's budget: minAvailable 2 would never let its one pod go.
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                     "metadata": {"name": "redis-pdb", "namespace": NS},
                     "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "redis"}}}});
    assert_eq!(run(&p, &pdb), (pdb.clone(), Vec::new()));
    let hpa = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                     "metadata": {"name": "my-app", "namespace": NS},
                     "spec": {"minReplicas": 1, "maxReplicas": 4,
                              "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "my-app"}}});
    assert_eq!(run(&p, &hpa), (hpa.clone(), Vec::new()));
}

#[test]
fn a_deployment_the_policy_names_is_governed_with_its_budget_and_hpa() {
    let p = policy(&format!(
        "{EVERYTHING}  workloads: [{{name: my-app, replicas: 4}}]\n"
    ));
    let (out, changes) = run(&p, &users_deployment("my-app"));
    assert_eq!(out["spec"]["replicas"], 4, "{changes:?}");
    let pdb = json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                     "metadata": {"name": "my-app-pdb", "namespace": NS},
                     "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "my-app"}}}});
    let (out, changes) = run(&p, &pdb);
    // minAvailable 2 of 4, in the field the PDB sets.
    assert_eq!(out["spec"]["maxUnavailable"], 2, "{changes:?}");
    let hpa = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                     "metadata": {"name": "my-app", "namespace": NS},
                     "spec": {"minReplicas": 1, "maxReplicas": 8,
                              "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "my-app"}}});
    let (out, changes) = run(&p, &hpa);
    assert_eq!(out["spec"]["minReplicas"], 4, "{changes:?}");
}

#[test]
fn knatives_own_objects_stay_governed() {
    let p = policy(EVERYTHING);
    let (out, _) = run(&p, &support::fixture("Deployment", NS, "controller"));
    assert_eq!(out["spec"]["replicas"], 3);
    let (out, _) = run(
        &p,
        &support::fixture("PodDisruptionBudget", NS, "activator-pdb"),
    );
    assert_eq!(out["spec"]["minAvailable"], 2);
}

/// An object an earlier version changed while it governed every Deployment
/// of the namespace gets its release values back (its records say what
/// they were), as where no policy exists.
#[test]
fn a_users_object_changed_earlier_gets_its_values_back() {
    let p = policy(EVERYTHING);
    let mut changed = users_deployment("my-app");
    changed["spec"]["replicas"] = json!(3);
    changed["metadata"]["annotations"] = json!({"knativeha.dev/original-replicas": "1"});
    let (out, changes) = run(&p, &changed);
    assert_eq!(out, users_deployment("my-app"), "{changes:?}");
    assert!(
        changes
            .iter()
            .all(|c| c.contains("not one of Knative's Deployments and not named by the policy")),
        "{changes:?}"
    );
}

/// A policy that raises the replicas and sets no budget leaves the 80%
/// PDBs Knative ships blocking every drain at the new count: said at
/// admission (and in `preview`), where it happens.
#[test]
fn a_shipped_budget_that_blocks_at_the_raised_count_is_warned_about() {
    let p = policy("  replicas: 3\n");
    let pdb = support::fixture("PodDisruptionBudget", NS, "activator-pdb");
    let (out, changes) = run(&p, &pdb);
    assert_eq!(out, pdb);
    assert_eq!(
        changes,
        [
            "poddisruptionbudget/activator-pdb: warning: minAvailable \"80%\" allows no voluntary disruption with 3 replicas (spec.replicas), so every node drain and cluster upgrade blocks; set spec.podDisruptionBudget (maxUnavailable: 1 lets a drain take one pod at a time) (policy p)"
        ]
    );
    // At 5 replicas 80% lets one go: nothing to say.
    assert!(run(&policy("  replicas: 5\n"), &pdb).1.is_empty());
}
