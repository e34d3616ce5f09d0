//! HTTPS routes: `POST /mutate` (a thin wrapper around
//! [`crate::admission::review`]), `POST /validate` (around
//! [`crate::admission::validate`]: policy objects; same limits, budget and
//! deadline) and JSON answers for everything else. Every HTTP status is
//! chosen here or in [`super::answered`] (reviews).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Extension;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http_body_util::BodyExt;
use tracing::Instrument;

use super::answered::{error_body, respond};
use super::budget::{Budget, Charge, SMALL_BODY_BYTES};
use crate::admission::{self, Answer, MAX_BODY_BYTES, ReviewOptions};
use crate::engine::Snapshot;
use crate::store::PolicyStore;
use crate::telemetry::{Metrics, clip, review_span};

/// Reading a request body must finish within this time (the API server
/// sends it at once; a slow body holds memory budget).
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Bodies larger than this are reviewed on the blocking thread pool.
const LARGE_BODY_BYTES: usize = SMALL_BODY_BYTES;

/// The body buffer's first allocation at most (it grows with what comes).
const INITIAL_BUFFER_BYTES: usize = 64 * 1024;

/// What the HTTPS handlers share.
#[derive(Clone, Debug)]
pub struct AppState {
    pub store: PolicyStore,
    pub metrics: Metrics,
    pub options: ReviewOptions,
}

/// The HTTPS router: `POST /mutate` and `POST /validate`; 405 for other
/// methods on them, 404 elsewhere; every answer has a JSON body.
pub fn router(state: AppState) -> Router {
    router_with_budget(state, Budget::default())
}

/// [`router`] with the given memory budget for request bodies. The state
/// is shared behind one `Arc`: a request clones a pointer, not every metric.
pub fn router_with_budget(state: AppState, budget: Budget) -> Router {
    Router::new()
        .route("/mutate", post(mutate).fallback(method_not_allowed))
        .route("/validate", post(validate).fallback(method_not_allowed))
        .fallback(not_found)
        .layer(Extension(budget))
        .with_state(Arc::new(state))
}

fn json_error(status: StatusCode, reason: &str, message: &str) -> Response {
    let body = error_body(status.as_u16(), reason, message);
    (status, axum::Json(body)).into_response()
}

async fn not_found(State(state): State<Arc<AppState>>, uri: axum::http::Uri) -> Response {
    state.metrics.http_error("not_found");
    json_error(
        StatusCode::NOT_FOUND,
        "NotFound",
        &format!(
            "no such path {}; the webhook serves POST /mutate and POST /validate",
            clip(uri.path(), 256)
        ),
    )
}

async fn method_not_allowed(
    State(state): State<Arc<AppState>>,
    method: axum::http::Method,
    uri: axum::http::Uri,
) -> Response {
    state.metrics.http_error("method_not_allowed");
    let mut resp = json_error(
        StatusCode::METHOD_NOT_ALLOWED,
        "MethodNotAllowed",
        &format!("method {method} not allowed on {}; use POST", uri.path()),
    );
    resp.headers_mut()
        .insert(header::ALLOW, header::HeaderValue::from_static("POST"));
    resp
}

fn too_large(metrics: &Metrics) -> Response {
    metrics.http_error("payload_too_large");
    json_error(
        StatusCode::PAYLOAD_TOO_LARGE,
        "RequestEntityTooLarge",
        &format!("request body larger than {MAX_BODY_BYTES} bytes"),
    )
}

struct InFlight<'a>(&'a Metrics);
impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.dec();
    }
}

/// Reads the body within the size limit, the read timeout and the memory
/// budget; the charge is held until the review is answered.
async fn read_body(
    body: Body,
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
    // Charged as the bytes arrive, not from what the header announces: a
    // client that declares megabytes and sends one byte holds one byte.
    // Room is reserved in advance for no one; the buffer grows with what came.
    let declared = declared.unwrap_or(0) as usize;
    let small_declared = declared <= SMALL_BODY_BYTES;
    let mut charge = budget.none();
    let mut bytes = Vec::with_capacity(declared.min(INITIAL_BUFFER_BYTES));
    let mut body = body;
    let read = async {
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                metrics.http_error("body_read");
                let msg = format!("reading the request body: {e}");
                json_error(StatusCode::BAD_REQUEST, "BadRequest", &clip(&msg, 256))
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
        Err(_) => {
            metrics.http_error("body_timeout");
            Err(json_error(
                StatusCode::REQUEST_TIMEOUT,
                "Timeout",
                "request body not received in time",
            ))
        }
        Ok(Err(resp)) => Err(resp),
        Ok(Ok(())) => Ok((bytes, charge)),
    }
}

fn over_budget(metrics: &Metrics) -> Response {
    metrics.http_error("over_budget");
    let mut resp = json_error(
        StatusCode::SERVICE_UNAVAILABLE,
        "ServiceUnavailable",
        "too many request bytes in flight; retry shortly",
    );
    resp.headers_mut()
        .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    resp
}

/// What a review route answers: [`admission::review`] or
/// [`admission::validate`] over the snapshot, the body and the options.
type Review = for<'a> fn(&Snapshot, &'a [u8], &ReviewOptions) -> Answer<'a>;

fn validate_review<'a>(_: &Snapshot, body: &'a [u8], _: &ReviewOptions) -> Answer<'a> {
    admission::validate(body)
}

async fn mutate(
    State(state): State<Arc<AppState>>,
    Extension(budget): Extension<Budget>,
    request: Request,
) -> Response {
    answer_review(&state, budget, request, admission::review)
        .instrument(review_span())
        .await
}

async fn validate(
    State(state): State<Arc<AppState>>,
    Extension(budget): Extension<Budget>,
    request: Request,
) -> Response {
    answer_review(&state, budget, request, validate_review)
        .instrument(review_span())
        .await
}

/// Reads the body within the limits and answers it with `review` (on the
/// blocking pool when large), inside the review's span ([`review_span`],
/// which the handlers open around it).
async fn answer_review(
    state: &AppState,
    budget: Budget,
    request: Request,
    review: Review,
) -> Response {
    let started = Instant::now();
    let metrics = &state.metrics;
    metrics.in_flight.inc();
    let _in_flight = InFlight(metrics);
    // The parts are borrowed: the `HeaderMap` extractor would copy them.
    let (parts, body) = request.into_parts();
    let (bytes, charge) = match read_body(body, &parts.headers, &budget, metrics).await {
        Ok(read) => read,
        Err(resp) => return resp,
    };

    let snapshot = state.store.load();
    let options = state.options;
    if bytes.len() <= LARGE_BODY_BYTES {
        let answer = review(&snapshot, &bytes, &options);
        return respond(metrics, answer, started);
    }
    // Parsing megabytes of JSON would stall an async worker. The charge
    // stays with the review, even if this request is abandoned.
    let turn = budget.large_review().await;
    let metrics = metrics.clone();
    let span = tracing::Span::current();
    let task = move || {
        let _entered = span.enter();
        let answer = review(&snapshot, &bytes, &options);
        let response = respond(&metrics, answer, started);
        drop((bytes, charge, turn));
        response
    };
    match tokio::task::spawn_blocking(task).await {
        Ok(response) => response,
        Err(e) => {
            state.metrics.http_error("internal");
            tracing::error!(error = %e, "review task failed");
            json_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                "the review could not be processed",
            )
        }
    }
}
