//! `POST /mutate` (and `/validate`) through the HTTPS router in process (`router.oneshot`, no
//! socket, no TLS): the least powerful way to test what the webhook answers.

#![allow(dead_code)]

use axum::body::Body;
use knative_ha_webhook::admission::ReviewOptions;
use knative_ha_webhook::engine::Snapshot;
use knative_ha_webhook::policy::Policy;
use knative_ha_webhook::server::{AppState, router};
use knative_ha_webhook::store::PolicyStore;
use knative_ha_webhook::telemetry::Metrics;
use prometheus_client::registry::Registry;
use serde_json::Value;
use tower::ServiceExt;

use crate::support::corpus::POLICY_YAML;

/// `examples/policy.yaml`, synced, no HPA targets (what `serve
/// --policy-file examples/policy.yaml` publishes).
pub fn example_snapshot() -> Snapshot {
    Snapshot::from_policies([Policy::from_yaml(POLICY_YAML).expect("examples/policy.yaml")])
}

/// The router over a store, with its metrics in a registry of its own.
pub struct Mutate {
    pub state: AppState,
    registry: Registry,
}

impl Mutate {
    pub fn new(store: PolicyStore, options: ReviewOptions) -> Mutate {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        Mutate {
            state: AppState {
                store,
                metrics,
                options,
            },
            registry,
        }
    }

    /// The router over [`example_snapshot`] with the default options.
    pub fn example() -> Mutate {
        Mutate::new(
            PolicyStore::new(example_snapshot()),
            ReviewOptions::default(),
        )
    }

    /// Sends `req` through the router: the status and the JSON body.
    pub async fn send(&self, req: axum::http::Request<Body>) -> (u16, Value) {
        let resp = router(self.state.clone()).oneshot(req).await.unwrap();
        let status = resp.status().as_u16();
        let bytes = axum::body::to_bytes(resp.into_body(), 16 << 20)
            .await
            .unwrap();
        let body = serde_json::from_slice(&bytes).expect("every answer has a JSON body");
        (status, body)
    }

    /// `POST /mutate` with `review` as JSON: the status and the JSON body.
    pub async fn post(&self, review: &Value) -> (u16, Value) {
        self.post_to("/mutate", review).await
    }

    /// `POST path` with `review` as JSON: the status and the JSON body.
    pub async fn post_to(&self, path: &str, review: &Value) -> (u16, Value) {
        let req = axum::http::Request::post(path)
            .header("content-type", "application/json")
            .body(Body::from(review.to_string()))
            .unwrap();
        self.send(req).await
    }

    /// The router's metrics in the text exposition format.
    pub fn metrics_text(&self) -> String {
        knative_ha_webhook::telemetry::encode(&self.registry)
    }
}
