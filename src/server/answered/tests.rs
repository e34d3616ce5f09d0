use std::borrow::Cow;
use std::time::Instant;

use super::{CHANGES_LOG_BYTES, change_lines, respond};
use crate::admission::{Answer, BadRequest, ReviewOutcome, Reviewed};
use crate::telemetry::Metrics;
use crate::telemetry::tests::{json_lines, text_lines};

#[test]
fn change_lines_are_joined_bounded_and_escaped() {
    let lines = vec!["a: x -> y".to_string(), "b:\nforged".to_string()];
    assert_eq!(change_lines(&lines), "a: x -> y; b:\\u{a}forged");
    let many = vec!["deployment/controller: spec.replicas unset -> 3".to_string(); 200];
    let logged = change_lines(&many);
    assert!(logged.len() < CHANGES_LOG_BYTES + 40, "{}", logged.len());
    assert!(logged.ends_with("bytes more)"), "{logged}");
}

/// The JSON line [`respond`] logs for `answer` inside the review's span (as
/// the routes call it), from `"level"` on, with the duration replaced by
/// `<ms>`.
fn logged(answer: Answer<'_>) -> String {
    let metrics = Metrics::unregistered();
    let text = json_lines(|| {
        crate::telemetry::review_span().in_scope(|| respond(&metrics, answer, Instant::now()));
    });
    let line = text.lines().next().expect("one line").to_string();
    let rest = &line[line.find("\"level\"").expect("a level")..];
    let (head, tail) = rest.split_once("\"duration_ms\":").expect("a duration");
    let tail = &tail[tail.find([',', '}']).unwrap()..];
    format!("{head}\"duration_ms\":<ms>{tail}")
}

fn reviewed(outcome: ReviewOutcome) -> Reviewed<'static> {
    let mut r = Reviewed::skipped(
        "Deployment",
        "CREATE",
        Cow::Borrowed("u1"),
        Cow::Borrowed("knative-serving"),
        Cow::Borrowed("con\ntroller"),
    );
    r.outcome = outcome;
    r
}

/// One line per review, its level, message and fields as the operators'
/// filters and docs/server.md read them.
#[test]
fn the_review_line_per_outcome() {
    const NAMES: &str = r#""uid":"u1","kind":"Deployment","namespace":"knative-serving","name":"con\\u{a}troller","operation":"CREATE""#;
    const TARGET: &str = r#""target":"knative_ha_webhook::server::routes"}"#;
    let bad = Answer::BadRequest(BadRequest {
        reason: "not JSON".into(),
    });
    assert_eq!(
        logged(bad),
        format!(
            r#""level":"WARN","message":"bad admission request","outcome":"bad_request","duration_ms":<ms>,"error":"not JSON",{TARGET}"#
        )
    );
    let mut failed = reviewed(ReviewOutcome::ErrorDenied);
    failed.error = Some("boom".into());
    assert_eq!(
        logged(Answer::Reviewed(failed)),
        format!(
            r#""level":"ERROR","message":"review failed",{NAMES},"outcome":"error_denied","patch_ops":0,"duration_ms":<ms>,"error":"boom",{TARGET}"#
        )
    );
    let mut refused = reviewed(ReviewOutcome::Refused);
    refused.error = Some("spec: bad".into());
    assert_eq!(
        logged(Answer::Reviewed(refused)),
        format!(
            r#""level":"WARN","message":"invalid policy refused",{NAMES},"outcome":"refused","duration_ms":<ms>,"error":"spec: bad",{TARGET}"#
        )
    );
    assert_eq!(
        logged(Answer::Reviewed(reviewed(ReviewOutcome::Unchanged))),
        format!(
            r#""level":"INFO","message":"review",{NAMES},"outcome":"unchanged","patch_ops":0,"duration_ms":<ms>,{TARGET}"#
        )
    );
    let mut patched = reviewed(ReviewOutcome::Patched);
    patched.patch_ops = 2;
    patched.changes = vec!["a: 1 -> 2".into(), "b: x -> y".into()];
    assert_eq!(
        logged(Answer::Reviewed(patched)),
        format!(
            r#""level":"INFO","message":"review",{NAMES},"outcome":"patched","patch_ops":2,"duration_ms":<ms>,"changes":"a: 1 -> 2; b: x -> y",{TARGET}"#
        )
    );
}

/// In the text format the names are the span's, shown once in its prefix;
/// in JSON, a line logged inside the review's span (not its own line) gets
/// them at its top level too, with no `"spans"` list repeating them.
#[test]
fn the_names_are_the_spans_and_shown_once() {
    let metrics = Metrics::unregistered();
    let text = text_lines(|| {
        let answer = Answer::Reviewed(reviewed(ReviewOutcome::Unchanged));
        crate::telemetry::review_span().in_scope(|| respond(&metrics, answer, Instant::now()));
    });
    assert_eq!(text.matches("uid=").count(), 1, "{text}");
    assert!(
        text.contains(r#"review{uid=u1 kind="Deployment" namespace=knative-serving name=con\u{a}troller operation="CREATE"}: knative_ha_webhook::server::routes: review outcome="unchanged""#),
        "{text}"
    );
    let json = json_lines(|| {
        let span = crate::telemetry::review_span();
        span.record("uid", "u1");
        span.in_scope(|| tracing::warn!(detail = 1, "inside"));
    });
    assert!(
        json.contains(r#""level":"WARN","message":"inside","uid":"u1","detail":1,"target""#)
            && !json.contains("spans"),
        "{json}"
    );
}
