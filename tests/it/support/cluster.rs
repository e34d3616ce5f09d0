//! The cluster policy source running against the fake API server: the
//! harness a test extends with its own `impl Harness` block, and the
//! objects the scenarios create.

#![allow(dead_code)]

use std::sync::Arc;

use knative_ha_webhook::engine::Snapshot;
use knative_ha_webhook::policy::Policy;
use knative_ha_webhook::reconcile::{self, RateLimiter, ReconcileMetrics, RunOptions, RunReport};
use knative_ha_webhook::sources::cluster::{self, ClusterMetrics, ClusterSourceConfig};
use knative_ha_webhook::store::PolicyStore;
use prometheus_client::registry::Registry;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::support::fakeapi::FakeApi;
use crate::support::wait_until;

/// The namespace the webhook runs in (where policy ConfigMaps live).
pub const OWN_NS: &str = "khw-system";

/// The cluster source running against a fake API server; aborted on drop.
pub struct Harness {
    pub api: Arc<FakeApi>,
    pub store: PolicyStore,
    pub registry: Registry,
    task: JoinHandle<cluster::Result<()>>,
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Harness {
    /// Starts the source with `config` (not waiting for anything).
    pub async fn start_with(api: impl Into<Arc<FakeApi>>, config: ClusterSourceConfig) -> Harness {
        let api = api.into();
        let client = api.client().await;
        let store = PolicyStore::default();
        let mut registry = Registry::default();
        let metrics = ClusterMetrics::register(&mut registry);
        let task = tokio::spawn(cluster::run(client, config, store.clone(), metrics));
        Harness {
            api,
            store,
            registry,
            task,
        }
    }

    /// Starts the source with the defaults for [`OWN_NS`].
    pub async fn start(api: impl Into<Arc<FakeApi>>) -> Harness {
        Harness::start_with(api, ClusterSourceConfig::new(OWN_NS)).await
    }

    /// Starts and waits for the first full sync.
    pub async fn synced(api: impl Into<Arc<FakeApi>>) -> Harness {
        let h = Harness::start(api).await;
        h.wait_synced().await;
        h
    }

    pub fn api_handle(&self) -> Arc<FakeApi> {
        self.api.clone()
    }

    pub async fn wait_synced(&self) {
        let store = self.store.clone();
        wait_until("first sync", async || store.load().synced.then_some(())).await;
    }

    /// Waits until the source's metrics have the line `line`.
    pub async fn wait_metric(&self, line: &str) {
        wait_until(&format!("metric line {line:?}"), async || {
            self.metrics_text().lines().any(|l| l == line).then_some(())
        })
        .await;
    }

    /// The source's metrics in the text exposition format.
    pub fn metrics_text(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("encode");
        out
    }
}

/// An HPA in `namespace` scaling the Deployment `target`.
pub fn hpa(namespace: &str, name: &str, target: &str) -> Value {
    json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minReplicas": 1, "maxReplicas": 10,
                 "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target}},
    })
}

/// The group and resource of HighAvailabilityPolicies in the fake API server.
pub const GROUP: &str = "knativeha.dev";
pub const HAPS: &str = "highavailabilitypolicies";

/// A HighAvailabilityPolicy `name` (cluster-scoped) with `spec`.
pub fn hap_with_spec(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "knativeha.dev/v1alpha1", "kind": "HighAvailabilityPolicy",
        "metadata": {"name": name}, "spec": spec,
    })
}

/// A HighAvailabilityPolicy `name` for `namespace` with `replicas`.
pub fn hap(name: &str, namespace: &str, replicas: i64) -> Value {
    hap_with_spec(
        name,
        json!({"targetNamespace": namespace, "replicas": replicas}),
    )
}

/// The policy file of [`hap`] (what a policy ConfigMap holds).
pub fn policy_yaml(name: &str, namespace: &str, replicas: i64) -> String {
    format!(
        "apiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\nmetadata:\n  name: {name}\nspec:\n  targetNamespace: {namespace}\n  replicas: {replicas}\n"
    )
}

/// A policy ConfigMap `name` in [`OWN_NS`] (labelled as one) holding
/// `policy_yaml`.
pub fn policy_configmap(name: &str, policy_yaml: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": OWN_NS,
                     "labels": {"knativeha.dev/policy": "true"}},
        "data": {"policy.yaml": policy_yaml},
    })
}

/// One reconcile pass over `snapshot` and the fake API server's objects, as
/// the webhook's reconciler runs it (pod templates too); `dry_run` computes
/// the writes without making them.
pub async fn reconcile_pass(api: &FakeApi, snapshot: &Snapshot, dry_run: bool) -> RunReport {
    reconcile::Pass {
        client: &api.client().await,
        options: RunOptions {
            dry_run,
            pod_templates: true,
        },
        limiter: &mut RateLimiter::new(1000.0),
        metrics: &ReconcileMetrics::default(),
        may_write: &move || !dry_run,
        events: None,
    }
    .reconcile(snapshot, None)
    .await
}

/// One writing reconcile pass of `policy` ([`reconcile_pass`]); asserts it
/// went without an error.
pub async fn reconcile_all(api: &FakeApi, policy: &Policy) -> RunReport {
    let report = reconcile_pass(api, &Snapshot::from_policies([policy.clone()]), false).await;
    assert!(report.ok(), "{report:?}");
    report
}
