//! One answered review: counted in the metrics, its names recorded in the
//! review's span ([`crate::telemetry::review_span`], entered by the routes
//! for the whole review), logged once inside it (the review line), and
//! turned into its HTTP answer ([`http_answer`]).

use std::time::{Duration, Instant};

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use tracing::Level;

use crate::admission::{Answer, ReviewOutcome, Reviewed};
use crate::telemetry::{KindLabels, Metrics, RequestLabels, loggable};

/// The review line's target, the routes' module as it always was (log
/// filters name it).
const TARGET: &str = "knative_ha_webhook::server::routes";

/// A JSON error body (400, 404, 405, 408, 413, 500, 503), its `reason`
/// the Kubernetes name of the status.
pub(super) fn error_body(status: StatusCode, message: &str) -> serde_json::Value {
    let reason = match status {
        StatusCode::BAD_REQUEST => "BadRequest",
        StatusCode::NOT_FOUND => "NotFound",
        StatusCode::METHOD_NOT_ALLOWED => "MethodNotAllowed",
        StatusCode::REQUEST_TIMEOUT => "Timeout",
        StatusCode::PAYLOAD_TOO_LARGE => "RequestEntityTooLarge",
        StatusCode::SERVICE_UNAVAILABLE => "ServiceUnavailable",
        _ => "InternalError",
    };
    let code = status.as_u16();
    serde_json::json!({ "code": code, "reason": reason, "message": message })
}

/// The HTTP status and JSON body of a review's answer: 200 and the
/// AdmissionReview, or 400 and an error object saying what is wrong.
pub fn http_answer(answer: Answer<'_>) -> (StatusCode, Vec<u8>) {
    match answer {
        Answer::Reviewed(reviewed) => (StatusCode::OK, reviewed.body),
        Answer::BadRequest(bad) => {
            let body = error_body(StatusCode::BAD_REQUEST, &bad.reason);
            (StatusCode::BAD_REQUEST, body.to_string().into_bytes())
        }
    }
}

/// The change lines of a review for its log line: joined with `; `, at most
/// [`CHANGES_LOG_BYTES`] (clipped, saying how much more), control
/// characters escaped.
fn change_lines(changes: &[String]) -> String {
    loggable(&changes.join("; "), CHANGES_LOG_BYTES).into_owned()
}

/// The bound of a review log line's `changes` field.
pub const CHANGES_LOG_BYTES: usize = 2048;

/// Records the review's names in the current span (the review's), request
/// content clipped and escaped ([`loggable`]).
fn record_names(reviewed: &Reviewed<'_>) {
    use tracing::field::display;
    let span = tracing::Span::current();
    span.record("uid", display(loggable(&reviewed.uid, 256)));
    span.record("kind", reviewed.kind);
    span.record("namespace", display(loggable(&reviewed.namespace, 256)));
    span.record("name", display(loggable(&reviewed.name, 256)));
    span.record("operation", reviewed.operation);
}

/// Counts and logs one answered review inside the review's span, and turns
/// it into the HTTP answer.
pub(super) fn respond(metrics: &Metrics, answer: Answer<'_>, started: Instant) -> Response {
    let elapsed = started.elapsed();
    let (kind, operation, patch_ops) = match &answer {
        Answer::Reviewed(r) => {
            record_names(r);
            (r.kind, r.operation, r.patch_ops)
        }
        Answer::BadRequest(_) => {
            metrics.http_error("bad_request");
            ("other", "other", 0)
        }
    };
    let outcome = answer.outcome().as_str();
    let labels = RequestLabels {
        kind,
        operation,
        outcome,
    };
    metrics.requests.get_or_create(&labels).inc();
    let kind_labels = KindLabels { kind };
    metrics
        .request_duration
        .get_or_create(&kind_labels)
        .observe(elapsed.as_secs_f64());
    if patch_ops > 0 {
        metrics
            .patch_operations
            .get_or_create(&kind_labels)
            .inc_by(patch_ops as u64);
    }
    log_review(&answer, elapsed);
    let (status, body) = http_answer(answer);
    let json = [(header::CONTENT_TYPE, "application/json")];
    (status, json, body).into_response()
}

/// Writes the log line of one answered review, inside the review's span
/// (which holds the names): `ERROR` for a failed review, `WARN` for a
/// refused policy or a bad request, `INFO` otherwise; `None` fields are
/// left out. Request content is clipped and escaped ([`loggable`]: errors
/// 1 KiB, a refused policy's errors 4 KiB, changes [`CHANGES_LOG_BYTES`]).
fn log_review(answer: &Answer<'_>, elapsed: Duration) {
    let outcome = answer.outcome().as_str();
    // Whole microseconds as milliseconds: at most 3 decimals, no float noise.
    let duration_ms = elapsed.as_micros() as f64 / 1000.0;
    let (level, message, patch_ops, error, changes) = match answer {
        Answer::BadRequest(bad) => {
            let error = loggable(&bad.reason, 1024);
            (
                Level::WARN,
                "bad admission request",
                None,
                Some(error),
                None,
            )
        }
        Answer::Reviewed(r) => match (&r.outcome, &r.error) {
            (ReviewOutcome::ErrorAllowed | ReviewOutcome::ErrorDenied, Some(err)) => {
                let error = Some(loggable(err, 1024));
                (
                    Level::ERROR,
                    "review failed",
                    Some(r.patch_ops),
                    error,
                    None,
                )
            }
            (ReviewOutcome::Refused, Some(err)) => {
                let error = Some(loggable(err, 4096));
                (Level::WARN, "invalid policy refused", None, error, None)
            }
            _ => {
                let changes = (!r.changes.is_empty()).then(|| change_lines(&r.changes));
                (Level::INFO, "review", Some(r.patch_ops), None, changes)
            }
        },
    };
    macro_rules! line {
        ($level:expr) => {
            tracing::event!(
                target: TARGET,
                $level,
                outcome,
                patch_ops,
                duration_ms,
                error = error.as_ref().map(tracing::field::display),
                changes = changes.as_ref().map(tracing::field::display),
                "{message}"
            )
        };
    }
    match level {
        Level::ERROR => line!(Level::ERROR),
        Level::WARN => line!(Level::WARN),
        _ => line!(Level::INFO),
    }
}

#[cfg(test)]
mod tests;
