//! HTTPS routes: `POST /mutate` (a thin wrapper around
//! [`crate::admission::review`]), `POST /validate` (around
//! [`crate::admission::validate`]: policy objects; same limits, budget and
//! deadline) and JSON answers for everything else. Every HTTP status is
//! chosen here or in [`super::answered`] (reviews).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http_body_util::BodyExt;
use tracing::Instrument;

use super::OnDrop;
use super::answered::{error_body, respond};
use super::budget::{Budget, Charge, SMALL_BODY_BYTES};
use crate::admission::{self, Answer, MAX_BODY_BYTES, ReviewOptions};
use crate::engine::Snapshot;
use crate::store::PolicyStore;
use crate::telemetry::{Metrics, clip, review_span};

/// Reading a request body must finish within this time (the API server
/// sends it at once; a slow body holds memory budget).
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// What the HTTPS handlers share.
#[derive(Clone, Debug)]
pub struct AppState {
    pub store: PolicyStore,
    pub metrics: Metrics,
    pub options: ReviewOptions,
}

/// The routes' state: the handlers' and the memory budget of request bodies.
struct Routes {
    app: AppState,
    budget: Budget,
}

/// What a review route answers: [`admission::review`] or
/// [`admission::validate`] over the snapshot, the body and the options.
type Review = for<'a> fn(&Snapshot, &'a [u8], &ReviewOptions) -> Answer<'a>;

/// The HTTPS router: `POST /mutate` and `POST /validate`; 405 for other
/// methods on them, 404 elsewhere; every answer has a JSON body.
pub fn router(state: AppState) -> Router {
    router_with_budget(state, Budget::default())
}

/// [`router`] with the given memory budget for request bodies. The state
/// is shared behind one `Arc`: a request clones a pointer, not every metric.
pub fn router_with_budget(state: AppState, budget: Budget) -> Router {
    let route = |review: Review| {
        let handler = move |State(routes): State<Arc<Routes>>, request: Request| {
            answer_review(routes, request, review).instrument(review_span())
        };
        post(handler).fallback(method_not_allowed)
    };
    let validate: Review = |_, body, _| admission::validate(body);
    Router::new()
        .route("/mutate", route(admission::review))
        .route("/validate", route(validate))
        .fallback(not_found)
        .with_state(Arc::new(Routes { app: state, budget }))
}

/// An error answer with its JSON body, counted by `why` in `http_errors`.
fn http_error(metrics: &Metrics, why: &'static str, status: StatusCode, message: &str) -> Response {
    metrics.http_error(why);
    (status, axum::Json(error_body(status, message))).into_response()
}

async fn not_found(State(routes): State<Arc<Routes>>, uri: Uri) -> Response {
    let path = clip(uri.path(), 256);
    let message =
        format!("no such path {path}; the webhook serves POST /mutate and POST /validate");
    http_error(
        &routes.app.metrics,
        "not_found",
        StatusCode::NOT_FOUND,
        &message,
    )
}

async fn method_not_allowed(
    State(routes): State<Arc<Routes>>,
    method: Method,
    uri: Uri,
) -> Response {
    let message = format!("method {method} not allowed on {}; use POST", uri.path());
    let status = StatusCode::METHOD_NOT_ALLOWED;
    let mut resp = http_error(&routes.app.metrics, "method_not_allowed", status, &message);
    resp.headers_mut()
        .insert(header::ALLOW, header::HeaderValue::from_static("POST"));
    resp
}

fn too_large(metrics: &Metrics) -> Response {
    let message = format!("request body larger than {MAX_BODY_BYTES} bytes");
    http_error(
        metrics,
        "payload_too_large",
        StatusCode::PAYLOAD_TOO_LARGE,
        &message,
    )
}

fn over_budget(metrics: &Metrics) -> Response {
    let message = "too many request bytes in flight; retry shortly";
    let mut resp = http_error(
        metrics,
        "over_budget",
        StatusCode::SERVICE_UNAVAILABLE,
        message,
    );
    resp.headers_mut()
        .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    resp
}

/// Reads the body within the size limit, the read timeout and the memory
/// budget; the charge is held until the review is answered.
async fn read_body(
    mut body: Body,
    headers: &HeaderMap,
    budget: &Budget,
    metrics: &Metrics,
) -> Result<(Vec<u8>, Charge), Response> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|len| len > MAX_BODY_BYTES as u64) {
        return Err(too_large(metrics));
    }
    // Charged as the bytes arrive, not from what the header announces (see
    // `budget`); the buffer's first allocation is 64 KiB at most and it
    // grows with what came.
    let declared = declared.unwrap_or(0) as usize;
    let small_declared = declared <= SMALL_BODY_BYTES;
    let mut charge = budget.none();
    let mut bytes = Vec::with_capacity(declared.min(64 * 1024));
    let read = async {
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                let message = clip(&format!("reading the request body: {e}"), 256);
                http_error(metrics, "body_read", StatusCode::BAD_REQUEST, &message)
            })?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            let len = bytes.len() + data.len();
            if len > MAX_BODY_BYTES {
                return Err(too_large(metrics));
            }
            let small = small_declared && len <= SMALL_BODY_BYTES;
            if !budget.add(&mut charge, data.len(), small).await {
                return Err(over_budget(metrics));
            }
            bytes.extend_from_slice(&data);
        }
        Ok(())
    };
    match tokio::time::timeout(BODY_READ_TIMEOUT, read).await {
        Ok(read) => read.map(|()| (bytes, charge)),
        Err(_) => {
            let message = "request body not received in time";
            let status = StatusCode::REQUEST_TIMEOUT;
            Err(http_error(metrics, "body_timeout", status, message))
        }
    }
}

/// Reads the body within the limits and answers it with `review` (on the
/// blocking pool when larger than [`SMALL_BODY_BYTES`]), inside the
/// review's span ([`review_span`], which the route opens around it).
async fn answer_review(routes: Arc<Routes>, request: Request, review: Review) -> Response {
    let started = Instant::now();
    let metrics = &routes.app.metrics;
    metrics.in_flight.inc();
    let _in_flight = OnDrop(|| {
        metrics.in_flight.dec();
    });
    // The parts are borrowed: the `HeaderMap` extractor would copy them.
    let (parts, body) = request.into_parts();
    let (bytes, charge) = match read_body(body, &parts.headers, &routes.budget, metrics).await {
        Ok(read) => read,
        Err(resp) => return resp,
    };

    let snapshot = routes.app.store.load();
    let options = routes.app.options;
    if bytes.len() <= SMALL_BODY_BYTES {
        let answer = review(&snapshot, &bytes, &options);
        return respond(metrics, answer, started);
    }
    // Parsing megabytes of JSON would stall an async worker. The charge
    // stays with the review, even if this request is abandoned.
    let turn = routes.budget.large_review().await;
    let task_metrics = metrics.clone();
    let span = tracing::Span::current();
    let task = move || {
        let _entered = span.enter();
        let answer = review(&snapshot, &bytes, &options);
        let response = respond(&task_metrics, answer, started);
        drop((bytes, charge, turn));
        response
    };
    match tokio::task::spawn_blocking(task).await {
        Ok(response) => response,
        Err(e) => {
            tracing::error!(error = %e, "review task failed");
            let message = "the review could not be processed";
            let status = StatusCode::INTERNAL_SERVER_ERROR;
            http_error(metrics, "internal", status, message)
        }
    }
}
