//! What the engine does to the real Knative v1.23.0 objects, one case per
//! HA rule, read against Knative's own code (client-go leader
//! election, sharedmain's `--disable-ha`, the Knative Operator's HA rules).

use crate::support;
use support::{mutate_checked as run_ns, serving_policy as policy};

use std::collections::BTreeSet;

use knative_ha_webhook::engine::Operation;
use knative_ha_webhook::policy::Policy;
use serde_json::{Value, json};

const NS: &str = "knative-serving";

fn run(p: &Policy, object: &Value) -> (Value, Vec<String>) {
    run_ns(p, NS, Operation::Update, object)
}

/// Applies the policies one after another.
fn seq(policies: &[Policy], object: &Value) -> Value {
    policies.iter().fold(object.clone(), |o, p| run(p, &o).0)
}

fn deployment(name: &str) -> Value {
    support::fixture("Deployment", NS, name)
}

fn args(d: &Value) -> Vec<String> {
    d["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| c["args"].as_array().cloned().unwrap_or_default())
        .map(|a| a.as_str().unwrap().to_string())
        .collect()
}

fn has_disable_ha(d: &Value) -> bool {
    args(d).iter().any(|a| a == "--disable-ha")
}

#[test]
fn timings_invalid_after_merge_are_not_written_and_warned() {
    let mut cm = support::fixture("ConfigMap", NS, "config-leader-election");
    cm["data"]["retry-period"] = json!("30s");
    let p = policy("  leaderElection: {buckets: 3, renewDeadline: 20s}\n");
    let (out, changes) = run(&p, &cm);
    assert_eq!(out["data"]["buckets"], "3", "buckets still written");
    assert!(out["data"].get("renew-deadline").is_none(), "{out}");
    assert_eq!(out["data"]["retry-period"], "30s");
    let warning = changes
        .iter()
        .find(|c| c.contains("warning"))
        .expect("a warning");
    assert_eq!(
        warning,
        "configmap/config-leader-election: warning: leader election durations not written: \
         renew-deadline \"20s\" (policy) must be greater than retry-period \"30s\" (ConfigMap) x 1.2 = 36s \
         (client-go's JitterFactor; its leader election refuses to start otherwise) (policy p)"
    );
    // A valid merged set is written.
    let p = policy("  leaderElection: {renewDeadline: 40s, retryPeriod: 30s}\n");
    let (out, changes) = run(&p, &cm);
    assert_eq!(out["data"]["renew-deadline"], "40s", "{changes:?}");
}

#[test]
fn disable_ha_goes_when_a_later_policy_scales_up() {
    let off = policy("  leaderElection: {enabled: false}\n");
    let three = policy("  replicas: 3\n");
    for name in ["autoscaler-hpa", "net-kourier-controller"] {
        let d = deployment(name);
        let after_off = seq(std::slice::from_ref(&off), &d);
        assert!(has_disable_ha(&after_off), "{name}: off adds the flag");
        let after = seq(&[off.clone(), three.clone()], &d);
        assert_eq!(after["spec"]["replicas"], 3, "{name}");
        assert!(!has_disable_ha(&after), "{name}: {:?}", args(&after));
    }
}

#[test]
fn no_disable_ha_on_an_hpa_backed_deployment() {
    let off = policy("  leaderElection: {enabled: false}\n");
    let (out, _) = run(&off, &deployment("webhook"));
    assert!(!has_disable_ha(&out), "{:?}", args(&out));
}

#[test]
fn pingsource_adapter_replicas_never_touched() {
    let text = std::fs::read_to_string(support::repo_path(
        "tests/fixtures/knative-v1.23.0/eventing-core.yaml",
    ))
    .unwrap();
    let d: Value = serde_saphyr::from_str(&text).unwrap();
    let text = "apiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\nmetadata: {name: p}\nspec:\n  targetNamespace: knative-eventing\n  replicas: 3\n";
    let p = Policy::from_yaml(text).unwrap();
    for op in [Operation::Create, Operation::Update] {
        let (out, changes) = run_ns(&p, "knative-eventing", op, &d);
        assert_eq!(out["spec"]["replicas"], 0, "{op:?}: {changes:?}");
    }
    let mut one = d.clone();
    one["spec"]["replicas"] = json!(1);
    let (out, _) = run_ns(&p, "knative-eventing", Operation::Update, &one);
    assert_eq!(out["spec"]["replicas"], 1, "eventing-controller's 1 stays");
}

#[test]
fn required_anti_affinity_lets_a_rollout_stop_a_pod() {
    let p = policy("  replicas: 3\n  podAntiAffinity: {type: Required}\n");
    let (out, changes) = run(&p, &deployment("controller"));
    assert_eq!(
        out["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], 1,
        "{changes:?}"
    );
    // autoscaler-hpa with an explicit 0 too; a larger value stays.
    let mut d = deployment("autoscaler-hpa");
    d["spec"]["strategy"] =
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0}});
    assert_eq!(
        run(&p, &d).0["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
        1
    );
    d["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] = json!(2);
    assert_eq!(
        run(&p, &d).0["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"],
        2
    );
    // Preferred leaves the strategy alone.
    let p = policy("  replicas: 3\n  podAntiAffinity: {type: Preferred}\n");
    assert!(
        run(&p, &deployment("controller")).0["spec"]
            .get("strategy")
            .is_none()
    );
}

const HASH: &str = "knativeha.dev/leader-election-hash";

fn hash_of(d: &Value) -> Option<String> {
    d["spec"]["template"]["metadata"]["annotations"][HASH]
        .as_str()
        .map(str::to_string)
}

#[test]
fn leader_election_change_rolls_the_leader_elected_deployments_together() {
    let b3 = policy("  leaderElection: {buckets: 3}\n");
    let b5 = policy("  leaderElection: {buckets: 5}\n");
    let mut hashes = BTreeSet::new();
    for name in [
        "controller",
        "autoscaler",
        "autoscaler-hpa",
        "webhook",
        "net-kourier-controller",
    ] {
        let (out, _) = run(&b3, &deployment(name));
        let h = hash_of(&out).unwrap_or_else(|| panic!("{name} has the hash"));
        hashes.insert(h.clone());
        let again = seq(&[b3.clone(), b5.clone()], &deployment(name));
        assert_ne!(
            hash_of(&again),
            Some(h),
            "{name}: buckets 3 -> 5 changes the hash"
        );
    }
    assert_eq!(hashes.len(), 1, "the same settings give the same hash");
    assert_eq!(
        hash_of(&run(&b3, &deployment("activator")).0),
        None,
        "activator is not leader-elected"
    );
}

#[test]
fn lowering_the_policy_lowers_the_hpa() {
    let hpa = support::fixture("HorizontalPodAutoscaler", NS, "activator");
    let five = policy("  replicas: 5\n");
    let two = policy("  replicas: 2\n");
    let none = policy("  podAntiAffinity: {type: Preferred}\n");
    let at5 = seq(std::slice::from_ref(&five), &hpa);
    assert_eq!(
        (
            at5["spec"]["minReplicas"].clone(),
            at5["spec"]["maxReplicas"].clone()
        ),
        (json!(5), json!(24))
    );
    let at2 = run(&two, &at5).0;
    assert_eq!(
        (
            at2["spec"]["minReplicas"].clone(),
            at2["spec"]["maxReplicas"].clone()
        ),
        (json!(2), json!(21))
    );
    let back = run(&none, &at2).0;
    assert_eq!(
        (
            back["spec"]["minReplicas"].clone(),
            back["spec"]["maxReplicas"].clone()
        ),
        (json!(1), json!(20))
    );
    assert_eq!(
        back["metadata"]["annotations"]["knativeha.dev/original-min-replicas"],
        "1"
    );
    assert_eq!(
        back["metadata"]["annotations"]["knativeha.dev/original-max-replicas"],
        "20"
    );
}

#[test]
fn zone_anti_affinity_keeps_knatives_hostname_term() {
    let d = deployment("controller");
    let shipped = d["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
        ["preferredDuringSchedulingIgnoredDuringExecution"][0]
        .clone();
    let zone =
        policy("  podAntiAffinity: {type: Preferred, topologyKey: topology.kubernetes.io/zone}\n");
    let (out, _) = run(&zone, &d);
    let terms = out["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
        ["preferredDuringSchedulingIgnoredDuringExecution"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(terms.len(), 2, "{terms:?}");
    assert_eq!(terms[0], shipped);
    assert_eq!(
        terms[1]["podAffinityTerm"]["topologyKey"],
        "topology.kubernetes.io/zone"
    );
    // Going to Required hostname replaces our term only.
    let req = policy("  podAntiAffinity: {type: Required}\n");
    let (out2, _) = run(&req, &out);
    let aa = &out2["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"];
    assert_eq!(
        aa["preferredDuringSchedulingIgnoredDuringExecution"],
        json!([shipped])
    );
    assert_eq!(
        aa["requiredDuringSchedulingIgnoredDuringExecution"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn a_workloads_own_budget_is_written_in_the_releases_field() {
    let p = policy(
        "  replicas: 3\n  podDisruptionBudget: {minAvailable: 1}\n  workloads:\n  - name: activator\n    replicas: 5\n    podDisruptionBudget: {maxUnavailable: 2}\n",
    );
    let (a, _) = run(
        &p,
        &support::fixture("PodDisruptionBudget", NS, "activator-pdb"),
    );
    // maxUnavailable 2 from 5 activators up, in the field the release
    // sets: no percentage keeps 2 at every count the HPA reaches, and the
    // release's 80% allows the fewest beyond it (minAvailable 3 let 20 of
    // 23 go at once).
    assert_eq!(a["spec"]["minAvailable"], "80%");
    assert!(a["spec"].get("maxUnavailable").is_none());
    let (w, _) = run(
        &p,
        &support::fixture("PodDisruptionBudget", NS, "webhook-pdb"),
    );
    assert_eq!(w["spec"]["minAvailable"], 1);
}

fn operator_owned(mut object: Value) -> Value {
    object["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "operator.knative.dev/v1beta1", "kind": "KnativeServing",
        "name": "knative-serving", "uid": "1", "controller": true
    }]);
    object
}

/// The README's recommended policy, unchanged, makes an Operator install
/// highly available: every object the Knative Operator creates carries its
/// ownerReference, and the policy governs them by default.
#[test]
fn the_recommended_policy_governs_operator_owned_objects() {
    let p = Policy::from_yaml(support::corpus::POLICY_YAML).unwrap();
    for object in support::corpus::governed_objects()
        .into_iter()
        .map(|(_, o)| o)
    {
        let owned = operator_owned(object.clone());
        let (out, changes) = run(&p, &owned);
        let (plain, _) = run(&p, &object);
        assert!(
            !changes.iter().any(|c| c.contains("left unchanged")),
            "{}: {changes:?}",
            support::corpus::label(&object)
        );
        // The same changes as without the owner: only the ownerReference differs.
        let mut expected = plain.clone();
        expected["metadata"]["ownerReferences"] = owned["metadata"]["ownerReferences"].clone();
        assert_eq!(out, expected, "{}", support::corpus::label(&object));
    }
}

#[test]
fn operator_owned_objects_are_left_alone_when_the_policy_says_so() {
    let d = operator_owned(deployment("controller"));
    let p = policy("  replicas: 3\n  governOperatorOwned: false\n");
    let (out, changes) = run(&p, &d);
    assert_eq!(out, d);
    assert_eq!(
        changes,
        vec![
            "deployment/controller: warning: left unchanged: owned by the Knative Operator's \
              KnativeServing/knative-serving (the policy sets spec.governOperatorOwned: false) \
               (policy p)"
                .to_string()
        ]
    );
    for unset_or_true in ["", "  governOperatorOwned: true\n"] {
        let p = policy(&format!("  replicas: 3\n{unset_or_true}"));
        assert_eq!(run(&p, &d).0["spec"]["replicas"], 3, "{unset_or_true:?}");
    }
}

/// `kubectl scale` goes through the `deployments/scale` subresource, which
/// carries no pod template, so the rule of
/// `disable_ha_goes_when_a_later_policy_scales_up` cannot
/// remove `--disable-ha`: the Scale of a Deployment the policy runs with the
/// flag is held at one replica, with a warning naming the way to scale it.
#[test]
fn scale_subresource_keeps_disable_ha_deployments_at_one_replica() {
    let scale = |name: &str, replicas: i64| {
        json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
               "metadata": {"name": name, "namespace": NS},
               "spec": {"replicas": replicas}, "status": {"replicas": 1}})
    };
    let off = policy("  leaderElection: {enabled: false}\n");
    for name in ["autoscaler-hpa", "net-kourier-controller"] {
        let (out, changes) = run(&off, &scale(name, 3));
        assert_eq!(out["spec"]["replicas"], 1, "{name}: {changes:?}");
        assert_eq!(changes.len(), 1, "{changes:?}");
        assert!(
            changes[0].starts_with(&format!(
                "deployment/{name}: spec.replicas 3 -> 1 through the scale subresource: it runs --disable-ha"
            )),
            "{changes:?}"
        );
        // Scaling to one, or down, passes.
        assert!(run(&off, &scale(name, 1)).1.is_empty());
    }
    // Without --disable-ha (leader election on, an HPA-backed or a
    // leader-elected binary that does not take the flag) a Scale passes.
    let on = policy("  leaderElection: {enabled: true}\n");
    assert!(run(&on, &scale("autoscaler-hpa", 3)).1.is_empty());
    for name in ["webhook", "controller"] {
        let (out, changes) = run(&off, &scale(name, 3));
        assert_eq!(out["spec"]["replicas"], 3, "{name}: {changes:?}");
    }
}

/// An excluded Deployment is left alone by the policy, so it never gets
/// `--disable-ha` from it: its Scale must pass, not be held at one replica
/// with a reason ("it runs --disable-ha") that is not true and advice
/// (`workloads[].replicas`) that `check` refuses for an excluded name.
#[test]
fn scale_of_an_excluded_deployment_passes_under_disabled_leader_election() {
    let scale = json!({"apiVersion": "autoscaling/v1", "kind": "Scale",
           "metadata": {"name": "autoscaler-hpa", "namespace": NS},
           "spec": {"replicas": 3}, "status": {"replicas": 1}});
    let off = policy("  leaderElection: {enabled: false}\n  exclude: [autoscaler-hpa]\n");
    let (out, changes) = run(&off, &scale);
    assert_eq!(out["spec"]["replicas"], 3, "{changes:?}");
    assert!(changes.is_empty(), "{changes:?}");
}

/// A policy that stops asking for Required anti-affinity or `--disable-ha`
/// leaves the object as the release shipped it, not with an empty
/// `affinity: {podAntiAffinity: {}}` or `args: []` that the release's
/// manifest does not have (a permanent diff for diff-based GitOps).
#[test]
fn dropped_settings_leave_no_empty_leftovers() {
    let d = deployment("net-kourier-controller");
    let shipped_spec = d["spec"]["template"]["spec"].clone();
    assert!(
        shipped_spec.get("affinity").is_none()
            && shipped_spec["containers"][0].get("args").is_none()
    );
    let required =
        policy("  podAntiAffinity: {type: Required, topologyKey: topology.kubernetes.io/zone}\n");
    let none = policy("  replicas: 3\n");
    let after = seq(&[required, none.clone()], &d);
    assert!(
        after["spec"]["template"]["spec"].get("affinity").is_none(),
        "{}",
        after["spec"]["template"]["spec"]["affinity"]
    );
    let off = policy("  leaderElection: {enabled: false}\n");
    let on = policy("  leaderElection: {enabled: true}\n");
    let flagged = seq(&[off], &d);
    assert!(has_disable_ha(&flagged));
    let after = seq(&[on], &flagged);
    assert!(
        after["spec"]["template"]["spec"]["containers"][0]
            .get("args")
            .is_none(),
        "{}",
        after["spec"]["template"]["spec"]["containers"][0]["args"]
    );
    // And once clean, nothing more to change.
    let once = seq(std::slice::from_ref(&none), &after);
    assert_eq!(run(&none, &once), (once.clone(), Vec::new()));
}
