//! Budgets for the governed Deployments that ship none: which PDBs a
//! policy wants created, on Knative's own v1.23.0 objects.

use crate::support;
use knative_ha_webhook::engine::{Snapshot, budgets, created};
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
    budgets::wanted(&corpus::governing(&policy(spec)), NS, objects)
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
                p["metadata"]["annotations"][created::CREATED_FOR]
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
    let created = budgets::wanted(&corpus::governing(&policy(spec)), NS, &objs);
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
    let created = budgets::wanted(&corpus::governing(&p), NS, &objects());
    let pdb = created
        .iter()
        .find(|o| o["metadata"]["name"] == "controller-pdb")
        .unwrap();
    let (out, changes) =
        support::mutate_checked(&p, NS, knative_ha_webhook::engine::Operation::Create, pdb);
    assert_eq!(pdb["spec"]["maxUnavailable"], 2);
    assert_eq!((&out, changes), (pdb, Vec::new()));
}

/// `kubectl apply` (client- or server-side) of a release that ships
/// `controller-pdb {minAvailable: 80%}` over the created `controller-pdb`:
/// the API server merges the release's field beside the created one's and
/// refuses the PDB ("minAvailable and maxUnavailable cannot be both set")
/// unless the webhook hands the budget over: the created marks and the
/// created `maxUnavailable` go, the release's budget stays.
#[test]
fn a_release_budget_of_the_same_name_takes_a_created_one_over() {
    let spec = "  replicas: 3\n  podDisruptionBudget: {maxUnavailable: 1}\n";
    let p = policy(spec);
    let created = budgets::wanted(&corpus::governing(&p), NS, &objects());
    let pdb = created
        .iter()
        .find(|o| o["metadata"]["name"] == "controller-pdb")
        .unwrap();
    let mut server_side = pdb.clone();
    server_side["spec"]["minAvailable"] = json!("80%");
    let mut client_side = server_side.clone();
    client_side["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] =
        json!("{\"spec\":{\"minAvailable\":\"80%\"}}");
    for applied in [server_side, client_side] {
        assert!(created::taken_over(&applied));
        let (out, changes) = support::mutate_checked(
            &p,
            NS,
            knative_ha_webhook::engine::Operation::Update,
            &applied,
        );
        assert_eq!(out["spec"]["minAvailable"], "80%", "{changes:?}");
        assert!(out["spec"].get("maxUnavailable").is_none(), "{out}");
        assert!(created::created_for(&out).is_none(), "{out}");
        assert!(
            out["metadata"]
                .get("labels")
                .is_none_or(|l| l.get(created::MANAGED_BY.0).is_none()),
            "{out}"
        );
        assert!(changes[0].contains("handed over"), "{changes:?}");
        // Now the release's own: the reconciler neither counts it as its
        // own nor creates another beside it.
        let mut objs = objects();
        objs.push(out);
        assert!(!names(&wanted(spec, &objs)).contains(&"controller-pdb"));
        let plan = budgets::plan(&corpus::governing(&p), NS, &objs);
        assert!(plan.iter().all(|c| c.name != "controller-pdb"), "{plan:?}");
    }
    // The reconciler's own write of the created budget is not a take-over.
    assert!(!created::taken_over(pdb));
}

/// A Deployment an HPA scales, that no PDB selects (Eventing's broker
/// ingress and filter): a created `maxUnavailable` budget, which never
/// blocks a drain whatever the HPA scales to; a percentage stays one.
#[test]
fn hpa_scaled_deployments_without_a_budget_get_one_that_keeps_scaling() {
    let mut objs = objects();
    let mut app = objs
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == "controller")
        .unwrap()
        .clone();
    app["metadata"]["name"] = json!("ingress");
    app["spec"]["selector"] = json!({"matchLabels": {"app": "ingress"}});
    app["spec"]["template"]["metadata"]["labels"] = json!({"app": "ingress"});
    objs.push(app);
    let mut targets = corpus::hpa_targets();
    targets.insert("ingress".into());
    let created = |spec: &str| -> Option<Value> {
        let known = Snapshot::from_policies([policy(spec)]).knowing(NS, targets.clone(), None);
        budgets::wanted(&known, NS, &objs)
            .into_iter()
            .find(|p| p["metadata"]["name"] == "ingress-pdb")
            .map(|p| p["spec"]["maxUnavailable"].clone())
    };
    let workloads = "  workloads: [{name: ingress}]\n";
    assert_eq!(
        created(&format!(
            "  replicas: 3\n  podDisruptionBudget: {{maxUnavailable: \"34%\"}}\n{workloads}"
        )),
        Some(json!("34%"))
    );
    assert_eq!(
        created(&format!(
            "  replicas: 3\n  podDisruptionBudget: {{maxUnavailable: 1}}\n{workloads}"
        )),
        Some(json!(1))
    );
    // minAvailable 2 from 3 up, as a maxUnavailable: never more than the
    // policy allows at any count, one at the fewest.
    let moved = created(&format!(
        "  replicas: 3\n  podDisruptionBudget: {{minAvailable: 2}}\n{workloads}"
    ))
    .expect("created");
    assert!(moved.is_string() || moved == json!(1), "{moved}");
}

/// `governOperatorOwned: false` leaves the Operator's Deployments alone,
/// budgets included, as it leaves their HPAs and PDBs.
#[test]
fn no_budget_for_a_deployment_the_policy_leaves_to_the_knative_operator() {
    let spec = "  replicas: 3\n  podDisruptionBudget: {maxUnavailable: 1}\n";
    let mut objs = objects();
    for o in objs.iter_mut().filter(|o| o["kind"] == "Deployment") {
        o["metadata"]["ownerReferences"] = json!([{"apiVersion": "operator.knative.dev/v1beta1",
            "kind": "KnativeServing", "name": "knative-serving", "uid": "u"}]);
    }
    assert!(!wanted(spec, &objs).is_empty(), "governed by default");
    let left = format!("{spec}  governOperatorOwned: false\n");
    assert_eq!(wanted(&left, &objs), Vec::new());
}

/// A created budget is recognised by all of its marks, never by the
/// annotation alone: anyone who may edit a PDB can add that, and the
/// reconciler deletes what it created once no longer wanted. Knative's
/// `activator-pdb` so marked stays Knative's.
#[test]
fn only_a_budget_with_every_mark_counts_as_created() {
    let spec = "  replicas: 3\n  podDisruptionBudget: {maxUnavailable: 1}\n";
    let p = policy(spec);
    let mut objs = objects();
    let created = budgets::wanted(&corpus::governing(&p), NS, &objs);
    let controller = created
        .iter()
        .find(|o| o["metadata"]["name"] == "controller-pdb")
        .unwrap()
        .clone();
    assert_eq!(created::created_for(&controller), Some("controller"));
    let mut unlabelled = controller.clone();
    unlabelled["metadata"]["labels"] = json!({});
    assert_eq!(created::created_for(&unlabelled), None);
    let mut renamed = controller.clone();
    renamed["metadata"]["name"] = json!("other-pdb");
    assert_eq!(created::created_for(&renamed), None);
    // Knative's activator-pdb, marked by hand: not the reconciler's, never
    // deleted as unwanted.
    let activator = objs
        .iter_mut()
        .find(|o| o["kind"] == "PodDisruptionBudget" && o["metadata"]["name"] == "activator-pdb")
        .unwrap();
    activator["metadata"]["annotations"] = json!({created::CREATED_FOR: "activator"});
    activator["metadata"]["labels"] = json!({created::MANAGED_BY.0: created::MANAGED_BY.1});
    let marked = activator.clone();
    assert_eq!(created::created_for(&marked), None);
    let plan = budgets::plan(&Default::default(), NS, &objs);
    assert!(plan.is_empty(), "{plan:?}");
}
