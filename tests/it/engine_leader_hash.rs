//! The leader-election hash covers what is really
//! written. When `config-leader-election` holds the policy's durations back
//! (the merged set would make client-go refuse to start), the Deployments'
//! hash is the one of a policy without durations: they do not roll while
//! the durations Knative reads stay the same.

use crate::support;

use knative_ha_webhook::engine::leader::HASH_ANNOTATION;
use knative_ha_webhook::engine::{self, Answering, Input, Operation, Snapshot};
use knative_ha_webhook::policy::Policy;
use knative_ha_webhook::tools::preview;
use serde_json::{Map, Value, json};

const NS: &str = "knative-serving";

fn policy(leader_election: &str) -> Policy {
    support::serving_policy(&format!("  leaderElection: {leader_election}\n"))
}

fn data(value: Value) -> Map<String, Value> {
    value.as_object().unwrap().clone()
}

/// What is known in the namespace: its `config-leader-election` data.
type Known = Option<Map<String, Value>>;

fn ctx(leader_election: Known) -> Known {
    leader_election
}

/// The object after the mutation, and the change lines.
fn mutate(p: &Policy, object: &Value, ctx: &Known) -> (Value, Vec<String>) {
    let input = Input {
        operation: Operation::Update,
        namespace: NS,
        object,
    };
    let known = Snapshot::from_policies([p.clone()]).knowing(NS, Default::default(), ctx.clone());
    let out = engine::outcome(Answering::Governed(&known), &input).expect("engine");
    (
        out.object.unwrap_or_else(|| object.clone()),
        out.mutation.lines(),
    )
}

fn hash_of(p: &Policy, ctx: &Known) -> String {
    let d = support::fixture("Deployment", NS, "controller");
    let (out, changes) = mutate(p, &d, ctx);
    out["spec"]["template"]["metadata"]["annotations"][HASH_ANNOTATION]
        .as_str()
        .unwrap_or_else(|| panic!("no hash: {changes:?}"))
        .to_string()
}

#[test]
fn held_back_durations_are_left_out_of_the_hash() {
    let p = policy("{renewDeadline: 20s}");
    let cm_data = data(json!({"retryPeriod": "30s"}));
    // The ConfigMap gets no duration (renew 20s < 1.2 x retry 30s).
    let mut cm = support::fixture("ConfigMap", NS, "config-leader-election");
    cm["data"]["retryPeriod"] = json!("30s");
    let (written, changes) = mutate(&p, &cm, &ctx(None));
    assert_eq!(written["data"].get("renew-deadline"), None, "{changes:?}");
    assert!(
        changes
            .iter()
            .any(|c| c.contains("warning: leader election durations not written")),
        "{changes:?}"
    );
    // The Deployment's hash is the one of the policy without durations.
    let held = hash_of(&p, &ctx(Some(cm_data.clone())));
    let without = hash_of(&policy("{}"), &ctx(Some(cm_data)));
    assert_eq!(held, without);
    assert_ne!(
        held,
        hash_of(&p, &ctx(None)),
        "the durations count otherwise"
    );
}

#[test]
fn written_durations_are_hashed() {
    let p = policy("{renewDeadline: 20s}");
    // retry 10s: renew 20s > 12s, lease (default 60s) > 20s: written.
    let cm_data = data(json!({"retryPeriod": "10s", "_example": "..."}));
    let hashed = hash_of(&p, &ctx(Some(cm_data.clone())));
    assert_eq!(hashed, hash_of(&p, &ctx(None)));
    assert_ne!(hashed, hash_of(&policy("{}"), &ctx(Some(cm_data))));
    // A kebab key overrides only its own legacy key, as Knative reads it:
    // `retry-period: 10s` over `retryPeriod: 30s` lets the durations through.
    let both = data(json!({"retryPeriod": "30s", "retry-period": "10s"}));
    assert_eq!(hash_of(&p, &ctx(Some(both))), hashed);
}

#[test]
fn preview_hashes_what_the_manifests_configmap_lets_through() {
    let p = policy("{buckets: 5, renewDeadline: 20s}");
    let manifests = format!(
        "{}---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: config-leader-election, namespace: {NS}}}\ndata: {{retryPeriod: 30s}}\n",
        preview::to_yaml(&support::fixture("Deployment", NS, "controller")).unwrap()
    );
    let docs = preview::parse_manifests("m.yaml", &manifests).unwrap();
    let policies = [(NS.to_string(), p)].into();
    let out = preview::preview_documents(&policies, docs).unwrap();
    let hash = out[0].object["spec"]["template"]["metadata"]["annotations"][HASH_ANNOTATION]
        .as_str()
        .expect("hash");
    assert_eq!(hash, hash_of(&policy("{buckets: 5}"), &ctx(None)));
    assert!(
        out[1]
            .mutation
            .lines()
            .iter()
            .any(|c| c.contains("durations not written")),
        "{:?}",
        out[1].mutation.changes
    );
}

/// `config-leader-election` left unchanged (the opt-out label, or owned by
/// the Knative Operator while the policy sets `governOperatorOwned: false`) never
/// gets the policy's settings: a hash of them would restart the
/// leader-elected Deployments for settings Knative does not read. `preview`
/// sees the ConfigMap in the manifests and writes no hash then.
#[test]
fn no_hash_when_config_leader_election_is_left_unchanged() {
    let policy = support::serving_policy("  leaderElection: {buckets: 3}\n");
    let cm = support::fixture("ConfigMap", NS, "config-leader-election");
    let controller = support::fixture("Deployment", NS, "controller");
    let hash_of = |cm: &Value| {
        let out = support::preview_objects(&policy, NS, &[cm.clone(), controller.clone()]);
        out[1].object["spec"]["template"]["metadata"]["annotations"][HASH_ANNOTATION].clone()
    };
    assert!(hash_of(&cm).is_string(), "governed: the hash is written");
    let mut skipped = cm.clone();
    skipped["metadata"]["labels"] = json!({"knativeha.dev/skip": "true"});
    assert_eq!(hash_of(&skipped), Value::Null, "skip-labelled ConfigMap");
    let mut owned = cm.clone();
    owned["metadata"]["ownerReferences"] = json!([{"apiVersion": "operator.knative.dev/v1beta1",
        "kind": "KnativeServing", "name": "knative-serving", "uid": "u"}]);
    assert!(
        hash_of(&owned).is_string(),
        "Operator-owned ConfigMap, governed by default"
    );
    let policy =
        support::serving_policy("  leaderElection: {buckets: 3}\n  governOperatorOwned: false\n");
    let out = support::preview_objects(&policy, NS, &[owned, controller.clone()]);
    assert_eq!(
        out[1].object["spec"]["template"]["metadata"]["annotations"][HASH_ANNOTATION],
        Value::Null,
        "Operator-owned ConfigMap, governOperatorOwned: false"
    );
}

const MAX_SURGE: &str = "/spec/strategy/rollingUpdate/maxSurge";
const SURGE_RECORD: &str = "knativeha.dev/original-rollout-max-surge";

/// While a leader-elected Deployment rolls onto new leader-election settings,
/// its old and new pods each lead every key under their own bucket shape:
/// every new pod starts at once (`maxSurge: 100%`, as Knative ships
/// net-kourier-controller), so that window is one pod start, not one per
/// replica. The release's value is recorded and comes back without
/// leader election, and on restore.
#[test]
fn leader_elected_deployments_start_every_new_pod_at_once() {
    let p = support::serving_policy("  replicas: 3\n  leaderElection: {buckets: 3}\n");
    let controller = support::fixture("Deployment", NS, "controller");
    let (out, changes) = mutate(&p, &controller, &ctx(None));
    assert_eq!(out.pointer(MAX_SURGE), Some(&json!("100%")), "{changes:?}");
    assert_eq!(
        out["metadata"]["annotations"][SURGE_RECORD],
        json!("null"),
        "{changes:?}"
    );
    assert!(
        changes
            .iter()
            .any(|c| c.contains("maxSurge unset (25%) -> 100%")),
        "{changes:?}"
    );
    // Not leader-elected: the activator rolls as it ships.
    let activator = support::fixture("Deployment", NS, "activator");
    let (a, _) = mutate(&p, &activator, &ctx(None));
    assert_eq!(a.pointer(MAX_SURGE), None);
    // Knative's own maxSurge of 100% stays, unrecorded.
    let kourier = support::fixture("Deployment", NS, "net-kourier-controller");
    let (k, changes) = mutate(&p, &kourier, &ctx(None));
    assert_eq!(k.pointer(MAX_SURGE), Some(&json!("100%")), "{changes:?}");
    assert_eq!(k["metadata"]["annotations"].get(SURGE_RECORD), None);
    // A later policy without leader election puts the release's value back.
    let without = support::serving_policy("  replicas: 3\n");
    let (back, changes) = mutate(&without, &out, &ctx(None));
    assert_eq!(back.pointer(MAX_SURGE), None, "{changes:?}");
    assert_eq!(back["metadata"]["annotations"].get(SURGE_RECORD), None);
    // So does restore.
    let restored = engine::restore::restore(NS, &out).expect("restore");
    let restored = restored.object.unwrap_or(out);
    assert_eq!(restored.pointer(MAX_SURGE), None);
}

/// The API server writes `maxSurge: 25%` into a RollingUpdate that leaves
/// it unset (the autoscaler ships `rollingUpdate: {maxUnavailable: 0}`):
/// at admission the engine sees it so, and records it as unset, as
/// `preview` does on the manifest, so the stored object equals preview's.
#[test]
fn the_api_servers_default_surge_is_recorded_as_unset() {
    let p = support::serving_policy("  replicas: 3\n  leaderElection: {buckets: 3}\n");
    let mut stored = support::fixture("Deployment", NS, "autoscaler");
    stored["spec"]["strategy"]["rollingUpdate"]["maxSurge"] = json!("25%");
    let (out, changes) = mutate(&p, &stored, &ctx(None));
    assert_eq!(out.pointer(MAX_SURGE), Some(&json!("100%")), "{changes:?}");
    assert_eq!(out["metadata"]["annotations"][SURGE_RECORD], json!("null"));
    let manifest = support::fixture("Deployment", NS, "autoscaler");
    let (previewed, _) = mutate(&p, &manifest, &ctx(None));
    assert_eq!(
        out["metadata"]["annotations"], previewed["metadata"]["annotations"],
        "the records are preview's"
    );
}

/// The API server refuses `rollingUpdate` beside `type: Recreate`: a
/// Recreate Deployment gets neither the surge nor Required's
/// maxUnavailable.
#[test]
fn a_recreate_deployment_gets_no_rolling_update_fields() {
    let p = support::serving_policy(
        "  replicas: 3\n  leaderElection: {buckets: 3}\n  podAntiAffinity: {type: Required, topologyKey: kubernetes.io/hostname}\n",
    );
    let mut d = support::fixture("Deployment", NS, "controller");
    d["spec"]["strategy"] = json!({"type": "Recreate"});
    let (out, changes) = mutate(&p, &d, &ctx(None));
    assert_eq!(
        out["spec"]["strategy"],
        json!({"type": "Recreate"}),
        "{changes:?}"
    );
}
