use std::sync::{Arc, Mutex};

use super::*;

#[test]
fn clip_and_loggable() {
    assert_eq!(clip("short", 10), "short");
    let long = "é".repeat(200);
    let c = clip(&long, 255);
    assert!(
        c.starts_with(&"é".repeat(127)) && c.ends_with("...(146 bytes more)"),
        "{c}"
    );
    let forged = "u1\n{\"level\":\"ERROR\"}\u{1b}[31mred";
    let l = loggable(forged, 256);
    assert!(!l.chars().any(char::is_control), "{l}");
    assert!(l.contains("\\u{a}") && l.contains("\\u{1b}"), "{l}");
    assert_eq!(loggable("plain-name", 256), "plain-name");
}

/// Lines written by a subscriber, kept for the test.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What `f` logs, in the process's JSON format: the test helper every
/// module's log-line tests use.
pub(crate) fn json_lines(f: impl FnOnce()) -> String {
    let lines = Lines::default();
    let sink = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .json()
        .event_format(json_format())
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    String::from_utf8(lines.0.lock().unwrap().clone()).unwrap()
}

/// What `f` logs, in the text format without colour.
pub(crate) fn text_lines(f: impl FnOnce()) -> String {
    let lines = Lines::default();
    let sink = lines.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || sink.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, f);
    String::from_utf8(lines.0.lock().unwrap().clone()).unwrap()
}

/// The review line as docs/server.md and the tests read it: keys in
/// this order, numbers as numbers, a UTC timestamp in microseconds.
#[test]
fn the_review_line_has_its_keys_in_order() {
    let text = json_lines(|| {
        tracing::info!(
            uid = %"u1", kind = "Deployment", namespace = %"knative-serving",
            name = %"controller", operation = "CREATE", outcome = "patched",
            patch_ops = 2usize, duration_ms = 0.021, changes = %"a \"b\"", "review"
        );
        tracing::info_span!("outer").in_scope(|| tracing::info!("in a span"));
    });
    let lines: Vec<&str> = text.lines().collect();
    let (stamp, rest) = lines[0]
        .strip_prefix("{\"timestamp\":\"")
        .and_then(|l| l.split_once('"'))
        .expect("the timestamp first");
    let shape: String = stamp
        .chars()
        .map(|c| if c.is_ascii_digit() { '0' } else { c })
        .collect();
    assert_eq!(shape, "0000-00-00T00:00:00.000000Z", "{stamp}");
    assert_eq!(
        rest,
        r#","level":"INFO","message":"review","uid":"u1","kind":"Deployment","namespace":"knative-serving","name":"controller","operation":"CREATE","outcome":"patched","patch_ops":2,"duration_ms":0.021,"changes":"a \"b\"","target":"knative_ha_webhook::telemetry::tests"}"#
    );
    assert!(
        lines[1].contains(r#""spans":[{"name":"outer"}]"#),
        "{}",
        lines[1]
    );
}

#[test]
fn build_info_is_exported() {
    let mut registry = Registry::default();
    Metrics::register(&mut registry);
    let text = encode(&registry);
    let want = format!(
        "knative_ha_webhook_build_info{{version=\"{}\"",
        env!("CARGO_PKG_VERSION")
    );
    assert!(text.contains(&want), "{text}");
}
