//! Budgets for the governed Deployments that ship none: which PDBs a
//! policy wants created, on Knative's own v1.23.0 objects.

use crate::support;
use knative_ha_webhook::engine::budgets;
use serde_json::{Value, json};
use support::corpus;
use support::serving_policy as policy;

const NS: &str = corpus::GOVERNED;

fn objects() -> Vec<Value> {
    corpus::governed_objects()
        .into_iter()
        .map(|(_, o)| o)
        .collect()
}

/// `name: maxUnavailable` of each wanted PDB.
fn wanted(spec: &str, objects: &[Value]) -> Vec<(String, Value)> {
    budgets::wanted(&policy(spec), NS, objects, &corpus::hpa_context())
        .into_iter()
        .map(|p| {
            assert_eq!(
                p["spec"]["selector"]["matchLabels"]["app"]
                    .as_str()
                    .map(|a| format!("{a}-pdb")),
                p["metadata"]["name"].as_str().map(String::from),
                "{p}"
            );
            assert_eq!(
                p["metadata"]["annotations"][budgets::CREATED_FOR]
                    .as_str()
                    .map(|d| format!("{d}-pdb")),
                p["metadata"]["name"].as_str().map(String::from)
            );
            (
                p["metadata"]["name"].as_str().unwrap().to_string(),
                p["spec"]["maxUnavailable"].clone(),
            )
        })
        .collect()
}

fn names(w: &[(String, Value)]) -> Vec<&str> {
    w.iter().map(|(n, _)| n.as_str()).collect()
}

#[test]
fn scaled_components_without_a_budget_get_one_where_the_policy_sets_budgets() {
    let w = wanted(
        "  replicas: 3\n  podDisruptionBudget: {maxUnavailable: 1}\n",
        &objects(),
    );
    // activator and webhook are HPA-scaled and ship their own PDBs.
    assert_eq!(
        names(&w),
        [
            "autoscaler-pdb",
            "controller-pdb",
            "autoscaler-hpa-pdb",
            "net-kourier-controller-pdb"
        ]
    );
    assert!(w.iter().all(|(_, v)| *v == json!(1)), "{w:?}");
}

#[test]
fn the_created_budget_is_the_policys_at_the_replicas_and_never_blocks_a_drain() {
    // minAvailable 2 of 3 allows 1; of 5, 3.
    let w = wanted(
        "  replicas: 3\n  podDisruptionBudget: {minAvailable: 2}\n  workloads: [{name: controller, replicas: 5}]\n",
        &objects(),
    );
    assert!(w.contains(&("controller-pdb".into(), json!(3))), "{w:?}");
    assert!(w.contains(&("autoscaler-pdb".into(), json!(1))), "{w:?}");
}

#[test]
fn none_without_a_budget_setting_at_one_replica_or_for_excluded_or_skipped_deployments() {
    assert_eq!(wanted("  replicas: 3\n", &objects()), []);
    assert_eq!(
        wanted("  podDisruptionBudget: {maxUnavailable: 1}\n", &objects()),
        []
    );
    let w = wanted(
        "  replicas: 3\n  podDisruptionBudget: {maxUnavailable: 1}\n  exclude: [controller]\n",
        &objects(),
    );
    assert!(!names(&w).contains(&"controller-pdb"), "{w:?}");
    let mut objs = objects();
    for o in objs
        .iter_mut()
        .filter(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "autoscaler")
    {
        o["metadata"]["labels"]["knativeha.dev/skip"] = json!("true");
    }
    let w = wanted(
        "  replicas: 3\n  podDisruptionBudget: {maxUnavailable: 1}\n",
        &objs,
    );
    assert!(!names(&w).contains(&"autoscaler-pdb"), "{w:?}");
}

#[test]
fn never_where_another_budget_selects_the_pods_or_holds_the_name() {
    let spec = "  replicas: 3\n  podDisruptionBudget: {maxUnavailable: 1}\n";
    let mut objs = objects();
    // A user's PDB over the controller's pods (by expression), another named autoscaler-pdb.
    objs.push(
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "mine", "namespace": NS},
        "spec": {"minAvailable": 1, "selector": {"matchExpressions": [
            {"key": "app", "operator": "In", "values": ["controller", "x"]}]}}}),
    );
    objs.push(
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "autoscaler-pdb", "namespace": NS},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "other"}}}}),
    );
    assert_eq!(
        names(&wanted(spec, &objs)),
        ["autoscaler-hpa-pdb", "net-kourier-controller-pdb"]
    );
    // A PDB this tool created for the Deployment does not count against it.
    let mut objs = objects();
    let created = budgets::wanted(&policy(spec), NS, &objs, &corpus::hpa_context());
    objs.extend(created);
    assert_eq!(
        names(&wanted(spec, &objs)),
        [
            "autoscaler-pdb",
            "controller-pdb",
            "autoscaler-hpa-pdb",
            "net-kourier-controller-pdb"
        ]
    );
}

#[test]
fn the_webhook_leaves_a_created_budget_alone() {
    // The PDB rule would write "50%" into a PDB of the controller; the
    // created one states the disruptions that allows at 3 replicas.
    let p = policy("  replicas: 3\n  podDisruptionBudget: {maxUnavailable: \"50%\"}\n");
    let created = budgets::wanted(&p, NS, &objects(), &corpus::hpa_context());
    let pdb = created
        .iter()
        .find(|o| o["metadata"]["name"] == "controller-pdb")
        .unwrap();
    let (out, changes) =
        support::mutate_checked(&p, NS, knative_ha_webhook::engine::Operation::Create, pdb);
    assert_eq!(pdb["spec"]["maxUnavailable"], 2);
    assert_eq!((&out, changes), (pdb, Vec::new()));
}
