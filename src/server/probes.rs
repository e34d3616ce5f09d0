//! Plain-HTTP operations endpoints: `/metrics`, `/healthz`, `/readyz`.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;
use tokio::sync::watch;

use crate::store::PolicyStore;
use crate::telemetry::Metrics;
use crate::tls::TlsReloader;

/// What readiness depends on.
#[derive(Clone)]
pub struct Readiness {
    pub store: PolicyStore,
    pub tls: Arc<TlsReloader>,
    /// True once shutdown began.
    pub shutting_down: watch::Receiver<bool>,
    pub metrics: Metrics,
}

/// The parts of readiness, as `/readyz` reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadyState {
    pub ready: bool,
    pub certificate: bool,
    pub policy_synced: bool,
    pub shutting_down: bool,
}

impl Readiness {
    pub fn check(&self) -> ReadyState {
        let certificate = self.tls.has_certificate();
        let policy_synced = self.store.load().synced;
        let shutting_down = *self.shutting_down.borrow();
        let ready = certificate && policy_synced && !shutting_down;
        self.metrics.ready.set(i64::from(ready));
        self.metrics.policy_synced.set(i64::from(policy_synced));
        ReadyState {
            ready,
            certificate,
            policy_synced,
            shutting_down,
        }
    }
}

/// The probes' state: what readiness depends on, and the metrics.
type Probes = (Readiness, Arc<Registry>);

/// Router of the metrics listener.
pub fn router(readiness: Readiness, registry: Arc<Registry>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state((readiness, registry))
}

async fn healthz() -> axum::Json<serde_json::Value> {
    axum::Json(serde_json::json!({"live": true}))
}

async fn readyz(State((readiness, _)): State<Probes>) -> Response {
    let s = readiness.check();
    let code = if s.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, axum::Json(s)).into_response()
}

async fn metrics(State((readiness, registry)): State<Probes>) -> Response {
    readiness.check();
    let openmetrics = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    let body = crate::telemetry::encode(&registry);
    ([(header::CONTENT_TYPE, openmetrics)], body).into_response()
}
