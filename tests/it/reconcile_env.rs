//! The harness of the reconciler tests (reconcile_cluster, reconcile_writes):
//! the fake API server (testkit/src/fakeapi: real HTTP, a real kube client),
//! the real cluster policy source feeding the store, reconcilers, and the
//! real Knative v1.23.0 control plane loaded as existing objects before any
//! policy exists.
//!
//! Every wait is bounded (`wait_until`); nothing asserts on elapsed time.

use crate::support;
use crate::support::fakeapi;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use fakeapi::FakeApi;
use knative_ha_webhook::engine::{self, Input, Operation};
use knative_ha_webhook::findings::Board;
use knative_ha_webhook::policy::Policy;
use knative_ha_webhook::reconcile::metrics::{KindLabel, RunLabel, WriteLabels};
use knative_ha_webhook::reconcile::{ReconcileConfig, ReconcileMetrics, Reconciler};
use knative_ha_webhook::sources::cluster::{self, ClusterMetrics, ClusterSourceConfig};
use knative_ha_webhook::store::PolicyStore;
use serde_json::{Value, json};
use support::wait_until;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub(crate) const OWN_NS: &str = "khw-system";
pub(crate) const SERVING: &str = "knative-serving";
pub(crate) const KOURIER: &str = "kourier-system";

/// (kind, namespace, name)
pub(crate) type Key = (String, String, String);

pub(crate) fn key_of(obj: &Value) -> Key {
    (
        obj["kind"].as_str().unwrap().to_string(),
        obj["metadata"]["namespace"].as_str().unwrap().to_string(),
        obj["metadata"]["name"].as_str().unwrap().to_string(),
    )
}

/// Loads the governed objects of the v1.23.0 fixtures (both namespaces).
pub(crate) fn load_control_plane(api: &FakeApi) -> Vec<Key> {
    let mut keys = Vec::new();
    for ((group, plural), obj) in support::corpus::reconciled_objects() {
        keys.push(key_of(&api.create(group, plural, obj)));
    }
    assert!(keys.len() >= 14, "fixture objects loaded: {keys:?}");
    keys
}

pub(crate) fn current(api: &FakeApi, key: &Key) -> Value {
    let (group, plural) = support::corpus::group_plural(&key.0);
    api.get(group, plural, &key.1, &key.2)
        .unwrap_or_else(|| panic!("{key:?} missing"))
}

pub(crate) fn patches(api: &FakeApi, key: &Key) -> usize {
    let (group, plural) = support::corpus::group_plural(&key.0);
    api.patches_of(group, plural, &key.1, &key.2)
}

/// What a user sees of an object: everything but metadata and status.
pub(crate) fn content(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(o) = v.as_object_mut() {
        o.remove("metadata");
        o.remove("status");
    }
    v
}

/// The example policy with `Required` anti-affinity, so that the Knative
/// Deployments (which ship a `Preferred` term) have pod-template drift too.
pub(crate) fn example_policy_value() -> Value {
    let text = std::fs::read_to_string(support::repo_path("examples/policy.yaml")).unwrap();
    let mut value: Value = serde_saphyr::from_str(&text).unwrap();
    value["spec"]["podAntiAffinity"]["type"] = json!("Required");
    value
}

pub(crate) fn policy_of(value: &Value) -> Policy {
    Policy::from_json(value).expect("valid policy")
}

/// For every governed object of `namespace` in the fake: the content the
/// engine wants (None when it is in line), computed independently of the
/// reconciler from the objects as they are now.
pub(crate) fn expectations(
    api: &FakeApi,
    keys: &[Key],
    policy: &Policy,
) -> BTreeMap<Key, Option<Value>> {
    let hpa_targets: BTreeSet<String> = keys
        .iter()
        .filter(|k| k.0 == "HorizontalPodAutoscaler")
        .map(|k| current(api, k))
        .filter(|h| h["spec"]["scaleTargetRef"]["kind"] == "Deployment")
        .map(|h| {
            h["metadata"]["namespace"].as_str().unwrap().to_string()
                + "/"
                + h["spec"]["scaleTargetRef"]["name"].as_str().unwrap()
        })
        .collect();
    keys.iter()
        .map(|k| {
            let obj = current(api, k);
            let targets = hpa_targets
                .iter()
                .filter_map(|t| t.strip_prefix(&format!("{}/", k.1)).map(str::to_string))
                .collect();
            let known =
                engine::Snapshot::from_policies([policy.clone()]).knowing(&k.1, targets, None);
            let input = Input {
                operation: Operation::Update,
                namespace: &k.1,
                object: &obj,
            };
            let out = engine::outcome(engine::Answering::Governed(&known), &input).expect("engine");
            (k.clone(), out.object.map(|o| content(&o)))
        })
        .collect()
}

/// config-leader-election: held back with the pod templates (Knative reads
/// it only at start, so applying it means restarting the pods).
pub(crate) fn is_leader_election_cm(k: &Key) -> bool {
    k.0 == "ConfigMap" && k.2 == "config-leader-election"
}

pub(crate) fn needing(exp: &BTreeMap<Key, Option<Value>>) -> BTreeSet<Key> {
    exp.iter()
        .filter(|(_, v)| v.is_some())
        .map(|(k, _)| k.clone())
        .collect()
}

/// The cluster source feeding a store, plus reconcilers, wired as `serve`
/// wires them (the reconcilers' verdicts reach the source's `Ready`).
pub(crate) struct Env {
    pub(crate) api: Arc<FakeApi>,
    pub(crate) keys: Vec<Key>,
    pub(crate) store: PolicyStore,
    findings: Board,
    source: JoinHandle<cluster::Result<()>>,
    pub(crate) reconcilers: Vec<Running>,
}

pub(crate) struct Running {
    pub(crate) metrics: ReconcileMetrics,
    pub(crate) stop: watch::Sender<bool>,
    pub(crate) task: Option<JoinHandle<()>>,
}

impl Drop for Env {
    fn drop(&mut self) {
        self.source.abort();
        for r in &mut self.reconcilers {
            if let Some(t) = r.task.take() {
                t.abort();
            }
        }
    }
}

impl Env {
    pub(crate) async fn start() -> Env {
        let api = Arc::new(FakeApi::start().await);
        let keys = load_control_plane(&api);
        let store = PolicyStore::default();
        let mut registry = prometheus_client::registry::Registry::default();
        let findings = Board::default();
        let source = tokio::spawn(cluster::run(
            api.client().await,
            ClusterSourceConfig {
                findings: findings.clone(),
                ..ClusterSourceConfig::new(OWN_NS)
            },
            store.clone(),
            ClusterMetrics::register(&mut registry),
        ));
        let s = store.clone();
        wait_until("cluster source synced", async || {
            s.load().synced.then_some(())
        })
        .await;
        Env {
            api,
            keys,
            store,
            findings,
            source,
            reconcilers: Vec::new(),
        }
    }

    pub(crate) async fn reconciler(
        &mut self,
        identity: &str,
        tweak: impl FnOnce(&mut ReconcileConfig),
    ) -> usize {
        let mut config = ReconcileConfig::for_tests(OWN_NS, identity);
        tweak(&mut config);
        let metrics =
            ReconcileMetrics::register(&mut prometheus_client::registry::Registry::default());
        let (stop, stop_rx) = watch::channel(false);
        let r = Reconciler::new(
            self.api.client().await,
            config,
            self.store.clone(),
            metrics.clone(),
        )
        .with_findings(self.findings.clone());
        let task = tokio::spawn(r.run(stop_rx));
        self.reconcilers.push(Running {
            metrics,
            stop,
            task: Some(task),
        });
        self.reconcilers.len() - 1
    }

    /// A reconciler that runs every 200 ms, holding the Lease.
    pub(crate) async fn reconciling(&mut self) -> usize {
        let r = self
            .reconciler("pod-a", |c| c.interval = Duration::from_millis(200))
            .await;
        self.wait_leader(r).await;
        r
    }

    pub(crate) async fn wait_leader(&self, i: usize) {
        let m = self.reconcilers[i].metrics.clone();
        wait_until("reconciler to hold the Lease", async || {
            (m.leader.get() == 1).then_some(())
        })
        .await;
    }

    pub(crate) fn serving_keys(&self) -> Vec<Key> {
        self.keys
            .iter()
            .filter(|k| k.1 == SERVING)
            .cloned()
            .collect()
    }

    pub(crate) fn create_policy(&self, value: Value) {
        self.api
            .create("knativeha.dev", "highavailabilitypolicies", value);
    }

    /// Waits until the store holds `policy` for knative-serving.
    pub(crate) async fn wait_policy(&self, policy: &Policy) {
        let s = self.store.clone();
        let want = policy.spec.clone();
        wait_until("policy in force", async || {
            (s.load().policy_for(SERVING).map(|p| p.spec.clone()) == Some(want.clone()))
                .then_some(())
        })
        .await;
    }

    /// Waits until every object of `exp` has the expected content.
    pub(crate) async fn wait_converged(&self, exp: &BTreeMap<Key, Option<Value>>) {
        let api = self.api.clone();
        wait_until("objects brought in line", async || {
            exp.iter()
                .all(|(k, want)| match want {
                    Some(w) => content(&current(&api, k)) == *w,
                    None => true,
                })
                .then_some(())
        })
        .await;
    }

    pub(crate) async fn wait_runs(&self, i: usize, n: u64) {
        let m = self.reconcilers[i].metrics.clone();
        wait_until("a successful reconcile run", async || {
            (m.runs.get_or_create(&RunLabel { result: "success" }).get() >= n).then_some(())
        })
        .await;
    }

    /// Every governed object of knative-serving in the fake, as it is now.
    pub(crate) fn serving_objects(&self) -> BTreeMap<Key, Value> {
        self.serving_keys()
            .into_iter()
            .map(|k| {
                let v = current(&self.api, &k);
                (k, v)
            })
            .collect()
    }

    /// A reconciler (`pod-a`, leading) and the example policy applied: the
    /// reconciler's index once its first run made every object what the
    /// engine wants (returned too).
    pub(crate) async fn governed_by_example(&mut self) -> (usize, BTreeMap<Key, Option<Value>>) {
        let r = self.reconciler("pod-a", |_| {}).await;
        self.wait_leader(r).await;
        let value = example_policy_value();
        let exp = expectations(&self.api, &self.serving_keys(), &policy_of(&value));
        self.create_policy(value);
        self.wait_converged(&exp).await;
        self.wait_runs(r, 1).await;
        (r, exp)
    }

    pub(crate) fn patch_counts(&self) -> BTreeMap<Key, usize> {
        self.keys
            .iter()
            .map(|k| (k.clone(), patches(&self.api, k)))
            .collect()
    }
}

pub(crate) fn writes(m: &ReconcileMetrics, kind: &'static str, result: &'static str) -> u64 {
    m.writes.get_or_create(&WriteLabels { kind, result }).get()
}

pub(crate) fn total_writes(m: &ReconcileMetrics) -> u64 {
    [
        "Deployment",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "ConfigMap",
    ]
    .iter()
    .flat_map(|k| ["success", "conflict", "error"].map(|r| writes(m, k, r)))
    .sum()
}

pub(crate) fn drift_gauge(m: &ReconcileMetrics, kind: &'static str) -> i64 {
    m.drift.get_or_create(&KindLabel { kind }).get()
}
