//! One answered review: counted in the metrics, its names recorded in the
//! review's span ([`crate::telemetry::review_span`], entered by the routes
//! for the whole review), logged once inside it (the review line), and
//! turned into its HTTP answer ([`http_answer`]).

use std::borrow::Cow;
use std::time::Instant;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use tracing::Level;

use crate::admission::{Answer, ReviewOutcome, Reviewed};
use crate::telemetry::{KindLabels, Metrics, RequestLabels, loggable};
use axum::http::StatusCode;

/// The review line's target, the routes' module as it always was (log
/// filters name it).
const TARGET: &str = "knative_ha_webhook::server::routes";

/// A JSON error body for non-review answers (400, 404, 405, 413, ...).
pub(super) fn error_body(code: u16, reason: &str, message: &str) -> serde_json::Value {
    serde_json::json!({ "code": code, "reason": reason, "message": message })
}

/// The HTTP status and JSON body of a review's answer: 200 and the
/// AdmissionReview, or 400 and an error object saying what is wrong.
pub fn http_answer(answer: Answer<'_>) -> (StatusCode, Vec<u8>) {
    match answer {
        Answer::Reviewed(reviewed) => (StatusCode::OK, reviewed.body),
        Answer::BadRequest(bad) => {
            let body = error_body(400, "BadRequest", &bad.reason);
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
    let outcome = answer.outcome();
    let (kind, operation, patch_ops) = match &answer {
        Answer::Reviewed(r) => {
            record_names(r);
            (r.kind, r.operation, r.patch_ops)
        }
        Answer::BadRequest(_) => ("other", "other", 0),
    };
    metrics
        .requests
        .get_or_create(&RequestLabels {
            kind,
            operation,
            outcome: outcome.as_str(),
        })
        .inc();
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
    // Whole microseconds as milliseconds: at most 3 decimals, no float noise.
    let duration_ms = elapsed.as_micros() as f64 / 1000.0;
    if let Answer::BadRequest(_) = &answer {
        metrics.http_error("bad_request");
    }
    ReviewLine::of(&answer, duration_ms).emit();
    let (status, body) = http_answer(answer);
    (
        status,
        [(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

/// The log line of one answered review, written by [`ReviewLine::emit`]
/// inside the review's span (which holds the names). `None` fields are left
/// out of the line.
struct ReviewLine<'a> {
    /// `ERROR` for a failed review, `WARN` for a refused policy or a bad
    /// request, `INFO` otherwise.
    level: Level,
    message: &'static str,
    outcome: &'static str,
    patch_ops: Option<usize>,
    duration_ms: f64,
    error: Option<Cow<'a, str>>,
    changes: Option<String>,
}

impl<'a> ReviewLine<'a> {
    /// The line for `answer`: request content clipped and escaped
    /// ([`loggable`]: errors 1 KiB, a refused policy's errors 4 KiB,
    /// changes [`CHANGES_LOG_BYTES`]).
    fn of(answer: &'a Answer<'_>, duration_ms: f64) -> ReviewLine<'a> {
        let mut line = ReviewLine {
            level: Level::INFO,
            message: "review",
            outcome: answer.outcome().as_str(),
            patch_ops: None,
            duration_ms,
            error: None,
            changes: None,
        };
        let r = match answer {
            Answer::BadRequest(bad) => {
                line.level = Level::WARN;
                line.message = "bad admission request";
                line.error = Some(loggable(&bad.reason, 1024));
                return line;
            }
            Answer::Reviewed(r) => r,
        };
        line.patch_ops = Some(r.patch_ops);
        match (&r.outcome, &r.error) {
            (ReviewOutcome::ErrorAllowed | ReviewOutcome::ErrorDenied, Some(err)) => {
                line.level = Level::ERROR;
                line.message = "review failed";
                line.error = Some(loggable(err, 1024));
            }
            (ReviewOutcome::Refused, Some(err)) => {
                line.level = Level::WARN;
                line.message = "invalid policy refused";
                line.patch_ops = None;
                line.error = Some(loggable(err, 4096));
            }
            _ if r.changes.is_empty() => {}
            _ => line.changes = Some(change_lines(&r.changes)),
        }
        line
    }

    /// Writes the line at its level; the field list is this one.
    fn emit(&self) {
        macro_rules! line {
            ($level:expr) => {
                tracing::event!(
                    target: TARGET,
                    $level,
                    outcome = self.outcome,
                    patch_ops = self.patch_ops,
                    duration_ms = self.duration_ms,
                    error = self.error.as_ref().map(tracing::field::display),
                    changes = self.changes.as_ref().map(tracing::field::display),
                    "{}",
                    self.message
                )
            };
        }
        match self.level {
            Level::ERROR => line!(Level::ERROR),
            Level::WARN => line!(Level::WARN),
            _ => line!(Level::INFO),
        }
    }
}

#[cfg(test)]
mod tests;
