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
fn a_users_object_changed_earlier_keeps_its_records_unhonoured() {
    let p = policy(EVERYTHING);
    let mut changed = users_deployment("my-app");
    changed["spec"]["replicas"] = json!(3);
    changed["metadata"]["annotations"] = json!({"knativeha.dev/original-replicas": "1"});
    changed["metadata"]["annotations"]["knativeha.dev/original-priority-class-name"] =
        json!("\"system-node-critical\"");
    // Records on an object no policy governs are not honoured: anyone who
    // may edit it may write them (100 replicas, system-node-critical), and
    // the reconciler would write what they say with its own identity.
    let (out, changes) = run(&p, &changed);
    assert_eq!(out, changed, "{changes:?}");
    assert!(
        changes.iter().all(|c| c.contains("warning:")
            && c.contains("not one of Knative's Deployments and not named by the policy")
            && c.contains("knative-ha-webhook restore")),
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

/// A budget is judged at what runs: where the activator's HPA carries the
/// opt-out label the policy does not raise it, so the activator runs what
/// Knative ships (1); `maxUnavailable: 1` of 3 written as `minAvailable: 2`
/// would allow no disruption there. `preview` sees the labelled HPA in the
/// manifests.
#[test]
fn a_budget_is_judged_at_one_replica_where_the_hpa_opts_out() {
    let mut hpa = support::fixture("HorizontalPodAutoscaler", NS, "activator");
    let pdb = support::fixture("PodDisruptionBudget", NS, "activator-pdb");
    let budget_of = |p: &knative_ha_webhook::policy::Policy, hpa: &Value| {
        let out = support::preview_objects(p, NS, &[hpa.clone(), pdb.clone()]);
        (out[1].object["spec"].clone(), out[1].mutation.lines())
    };
    let min2 = policy("  replicas: 3\n  podDisruptionBudget: {minAvailable: 2}\n");
    let max1 = policy("  replicas: 3\n  podDisruptionBudget: {maxUnavailable: 1}\n");
    assert_eq!(
        budget_of(&min2, &hpa).0["minAvailable"],
        2,
        "governed HPA: 3 run, one may go"
    );
    assert_eq!(budget_of(&max1, &hpa).0["minAvailable"], "66%");
    hpa["metadata"]["labels"] = json!({"knativeha.dev/skip": "true"});
    // minAvailable 2 with the 1 pod that runs would block every drain: not written.
    let (spec, changes) = budget_of(&min2, &hpa);
    assert_eq!(spec["minAvailable"], "80%", "not written: {changes:?}");
    assert!(
        changes
            .iter()
            .any(|c| c.contains("warning:") && c.contains("with 1 replica")),
        "{changes:?}"
    );
    // ... and the release's 80% over that one pod blocks every drain too:
    // the warning says so, not only of the policy's value.
    assert!(
        changes.iter().any(|c| c.contains(
            "the PDB's own minAvailable \"80%\" allows none there either: every node drain blocks"
        )),
        "{changes:?}"
    );
    // maxUnavailable 1 of the 1 that runs: minAvailable 0, the pod may go.
    assert_eq!(budget_of(&max1, &hpa).0["minAvailable"], 0);
}

/// Where the context lists every HPA of the namespace (the server's synced
/// watch, the reconciler's listing), an HPA-backed Deployment with none has
/// no HPA for the policy to raise: it runs what it runs, counted as 1.
#[test]
fn a_budget_is_judged_at_one_replica_where_the_hpa_is_absent() {
    use knative_ha_webhook::engine::{self, HPAS_LISTED, Input};
    let p = policy("  replicas: 3\n  podDisruptionBudget: {minAvailable: 2}\n");
    let pdb = support::fixture("PodDisruptionBudget", NS, "activator-pdb");
    let run_with = |targets: &[&str]| {
        let targets = targets.iter().map(|s| s.to_string()).collect();
        let known = engine::Snapshot::from_policies([p.clone()]).knowing(NS, targets, None);
        let input = Input {
            operation: Operation::Update,
            namespace: NS,
            object: &pdb,
        };
        engine::outcome(engine::Answering::Governed(&known), &input)
            .unwrap()
            .mutation
    };
    // The activator's HPA listed: 3 run, minAvailable 2 lets one go.
    assert!(
        !run_with(&[HPAS_LISTED, "activator", "webhook"])
            .patch
            .0
            .is_empty()
    );
    // Not known (preview of partial manifests): judged at the policy's 3 as before.
    assert!(!run_with(&[]).patch.0.is_empty());
    // Every HPA listed, none for the activator: held back, with the reason.
    let m = run_with(&[HPAS_LISTED, "webhook"]);
    assert!(m.patch.0.is_empty(), "{:?}", m.changes);
    assert!(
        m.lines()
            .iter()
            .any(|c| c.contains("warning:") && c.contains("no HorizontalPodAutoscaler")),
        "{:?}",
        m.changes
    );
}

/// The declaration of Knative's components agrees with the release
/// manifests of the fixtures: each Deployment is declared in its namespace,
/// an HPA scales exactly the ones declared HPA-scaled, and each declared
/// PDB is shipped and selects its Deployment's pods.
#[test]
fn the_components_declared_are_the_releases() {
    use knative_ha_webhook::knative::{self, Scaling};
    let docs = testkit::corpus::manifest_documents();
    fn of_kind<'d>(docs: &'d [Value], kind: &'static str) -> impl Iterator<Item = &'d Value> {
        docs.iter().filter(move |d| d["kind"] == kind)
    }
    let mut seen = 0;
    for d in of_kind(&docs, "Deployment") {
        let name = d["metadata"]["name"].as_str().unwrap();
        let c = knative::component(name).unwrap_or_else(|| panic!("{name} is not declared"));
        assert_eq!(d["metadata"]["namespace"], c.namespace, "{name}");
        let hpa = of_kind(&docs, "HorizontalPodAutoscaler")
            .any(|h| h["spec"]["scaleTargetRef"]["name"] == name);
        assert_eq!(hpa, c.scaling == Scaling::Hpa, "{name}: HPA");
        let app = &d["spec"]["selector"]["matchLabels"]["app"];
        let pdbs: Vec<&str> = of_kind(&docs, "PodDisruptionBudget")
            .filter(|p| &p["spec"]["selector"]["matchLabels"]["app"] == app)
            .filter_map(|p| p["metadata"]["name"].as_str())
            .collect();
        assert_eq!(pdbs, c.pdb.into_iter().collect::<Vec<_>>(), "{name}: PDB");
        seen += 1;
    }
    assert_eq!(seen, 7, "the fixtures' Deployments");
}

/// The chart registers the webhook for each governed kind's resource and
/// gives the reconciler rights on each one it lists.
#[test]
fn the_chart_names_every_governed_kind() {
    use knative_ha_webhook::engine::kinds::KINDS;
    let read = |rel: &str| std::fs::read_to_string(support::repo_path(rel)).unwrap();
    let webhook = read("charts/knative-ha-webhook/templates/mutatingwebhookconfiguration.yaml");
    let rbac = read("charts/knative-ha-webhook/templates/rbac.yaml");
    for k in &KINDS {
        assert!(
            webhook.contains(&format!("\"{}\"", k.webhook_resource)),
            "the webhook configuration does not name {}",
            k.webhook_resource
        );
        if k.listed {
            assert!(
                rbac.contains(&format!("\"{}\"", k.plural)),
                "the RBAC does not name {}",
                k.plural
            );
        }
    }
}

/// A `priorityClassName` naming a PriorityClass the cluster does not have
/// (a typo) is held back with a warning: rolled onto it, a Deployment could
/// create no pod (the API server refuses pods naming a missing class), and
/// every governed Deployment would roll at once. One the engine wrote
/// before goes back to the release's value; not known (offline), written.
#[test]
fn a_missing_priority_class_is_held_back_not_rolled_onto() {
    use knative_ha_webhook::engine::{self, Input};
    let p = policy("  replicas: 3\n  priorityClassName: knative-contrl-plane\n");
    let controller = support::fixture("Deployment", NS, "controller");
    let run_with = |known: Option<&[&str]>, object: &Value| {
        let snapshot = engine::Snapshot {
            priority_classes: known.map(|k| k.iter().map(|s| s.to_string()).collect()),
            ..engine::Snapshot::from_policies([p.clone()])
        };
        let input = Input {
            operation: Operation::Update,
            namespace: NS,
            object,
        };
        let m = engine::outcome(engine::Answering::Governed(&snapshot), &input)
            .unwrap()
            .mutation;
        let patch = serde_json::to_value(&m.patch).unwrap();
        let out = support::rfc6902::apply_rfc6902(object, &patch).unwrap();
        (out, m.lines())
    };
    const PATH: &str = "/spec/template/spec/priorityClassName";
    let (written, _) = run_with(None, &controller);
    assert_eq!(written.pointer(PATH), Some(&json!("knative-contrl-plane")));
    let (held, lines) = run_with(Some(&["knative-control-plane"]), &controller);
    assert_eq!(held.pointer(PATH), None, "{lines:?}");
    assert_eq!(held["spec"]["replicas"], 3, "the rest is written");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("warning")
                && l.contains("no PriorityClass knative-contrl-plane exists")),
        "{lines:?}"
    );
    // Written earlier, the class deleted since: the release's value back.
    let (back, lines) = run_with(Some(&[]), &written);
    assert_eq!(back.pointer(PATH), None, "{lines:?}");
    let (kept, _) = run_with(Some(&["knative-contrl-plane"]), &written);
    assert_eq!(kept.pointer(PATH), Some(&json!("knative-contrl-plane")));
}

/// Where no policy object exists (`--undo-unclaimed`), records are undone
/// on Knative's own objects only: on a user's, whoever may edit it may
/// have written them.
#[test]
fn unclaimed_records_are_undone_on_knatives_objects_only() {
    use knative_ha_webhook::engine::restore::undo_unclaimed;
    let mut users = users_deployment("my-app");
    users["spec"]["replicas"] = json!(3);
    users["metadata"]["annotations"] = json!({"knativeha.dev/original-replicas": "100"});
    let out = undo_unclaimed(NS, &users).unwrap();
    assert!(
        out.mutation.patch.0.is_empty(),
        "{:?}",
        out.mutation.lines()
    );
    let mut controller = support::fixture("Deployment", NS, "controller");
    controller["spec"]["replicas"] = json!(3);
    controller["metadata"]["annotations"] = json!({"knativeha.dev/original-replicas": "1"});
    let out = undo_unclaimed(NS, &controller).unwrap();
    assert!(!out.mutation.patch.0.is_empty(), "Knative's own is undone");
}

/// A record on a governed Deployment is put back only within the policy's
/// own bounds: whoever may edit the object may have written it, and the
/// reconciler would write what it says.
#[test]
fn records_outside_the_policys_bounds_are_not_put_back() {
    let none = policy("  leaderElection: {buckets: 2}\n");
    let mut controller = support::fixture("Deployment", NS, "controller");
    controller["spec"]["replicas"] = json!(3);
    controller["spec"]["template"]["spec"]["priorityClassName"] = json!("knative-control-plane");
    controller["metadata"]["annotations"] = json!({
        "knativeha.dev/original-replicas": "1000",
        "knativeha.dev/original-priority-class-name": "\"system-node-critical\""});
    let (out, changes) = run(&none, &controller);
    assert_eq!(out["spec"]["replicas"], 3, "{changes:?}");
    assert_eq!(
        out["spec"]["template"]["spec"]["priorityClassName"], "knative-control-plane",
        "{changes:?}"
    );
    // Within bounds: the release's value comes back.
    controller["metadata"]["annotations"] = json!({"knativeha.dev/original-replicas": "1"});
    let (out, _) = run(&none, &controller);
    assert_eq!(out["spec"]["replicas"], 1);
}

/// An HPA's recorded originals are put back only where they are no higher
/// than what the HPA holds now or the policy's replica bound: the engine
/// only ever raises an HPA's bounds, so a true original never is, and a
/// record of `maxReplicas: 2147483647` written by whoever may edit the HPA
/// is not what the reconciler writes.
#[test]
fn hpa_records_above_what_the_hpa_holds_are_not_put_back() {
    let mut hpa = support::fixture("HorizontalPodAutoscaler", NS, "activator");
    hpa["spec"]["minReplicas"] = json!(1);
    hpa["spec"]["maxReplicas"] = json!(20);
    // The engine's marks of its last write are forged too (they match
    // what the HPA holds), so the record looks like the engine's own.
    hpa["metadata"]["annotations"] = json!({
        "knativeha.dev/original-min-replicas": "1",
        "knativeha.dev/original-max-replicas": "2147483647",
        "knativeha.dev/written-min-replicas": "1",
        "knativeha.dev/written-max-replicas": "20"});
    // Removed (a policy that does not set replicas): nothing to put back.
    let (out, changes) = run(&policy("  leaderElection: {buckets: 2}\n"), &hpa);
    assert_eq!(out["spec"]["maxReplicas"], 20, "{changes:?}");
    // In force: the rule starts from what the HPA holds.
    let (out, changes) = run(&policy("  replicas: 3\n"), &hpa);
    assert_eq!(out["spec"]["minReplicas"], 3, "{changes:?}");
    assert_eq!(out["spec"]["maxReplicas"], 22, "{changes:?}");
    // A true original (below what the engine wrote) still comes back.
    hpa["spec"]["minReplicas"] = json!(3);
    hpa["spec"]["maxReplicas"] = json!(22);
    hpa["metadata"]["annotations"] = json!({
        "knativeha.dev/original-min-replicas": "1",
        "knativeha.dev/original-max-replicas": "20",
        "knativeha.dev/written-min-replicas": "3",
        "knativeha.dev/written-max-replicas": "22"});
    let (out, changes) = run(&policy("  leaderElection: {buckets: 2}\n"), &hpa);
    assert_eq!(out["spec"]["minReplicas"], 1, "{changes:?}");
    assert_eq!(out["spec"]["maxReplicas"], 20, "{changes:?}");
}
