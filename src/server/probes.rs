//! Plain-HTTP operations endpoints: `/metrics`, `/healthz`, `/readyz`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;

use crate::store::PolicyStore;
use crate::telemetry::Metrics;
use crate::tls::TlsReloader;

/// What readiness depends on.
#[derive(Clone)]
pub struct Readiness {
    pub store: PolicyStore,
    /// `None` means "no TLS in this process" (tests of the probes alone).
    pub tls: Option<Arc<TlsReloader>>,
    pub shutting_down: Arc<AtomicBool>,
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
        let certificate = self.tls.as_ref().is_none_or(|t| t.has_certificate());
        let policy_synced = self.store.load().synced;
        let shutting_down = self.shutting_down.load(Ordering::SeqCst);
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

#[derive(Clone)]
struct ProbeState {
    readiness: Readiness,
    registry: Arc<Registry>,
}

/// Router of the metrics listener.
pub fn router(readiness: Readiness, registry: Arc<Registry>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(ProbeState {
            readiness,
            registry,
        })
}

async fn healthz() -> Response {
    (
        StatusCode::OK,
        axum::Json(serde_json::json!({"live": true})),
    )
        .into_response()
}

async fn readyz(State(state): State<ProbeState>) -> Response {
    let s = state.readiness.check();
    let code = if s.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, axum::Json(s)).into_response()
}

async fn metrics(State(state): State<ProbeState>) -> Response {
    state.readiness.check();
    let body = crate::telemetry::encode(&state.registry);
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        body,
    )
        .into_response()
}
