use std::io;
use std::sync::{Arc, Mutex};

use tracing_subscriber::fmt::MakeWriter;

use super::*;

/// Lines written by a subscriber, kept for the test.
#[derive(Clone, Default)]
struct Lines(Arc<Mutex<Vec<u8>>>);

impl io::Write for Lines {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Lines {
    type Writer = Lines;
    fn make_writer(&'a self) -> Lines {
        self.clone()
    }
}

impl Lines {
    fn take(&self) -> Vec<String> {
        let bytes = std::mem::take(&mut *self.0.lock().unwrap());
        String::from_utf8(bytes)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

#[derive(Debug)]
struct Failure;

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("it broke:\n\t\"here\" \\ \u{1b}[31m")
    }
}

impl std::error::Error for Failure {}

/// Events of every field type, in and out of spans, and a `log` record.
fn emit() {
    tracing::info!(
        uid = %"6ba7b810-9dad-11d1-80b4-00c04fd430c8", kind = "Deployment",
        namespace = %"knative-serving", name = %"ctl\n\"x\"\u{7f}é\u{1}",
        operation = "CREATE", outcome = "patched", patch_ops = 2usize,
        duration_ms = 0.021, "review"
    );
    tracing::warn!(
        a = -3i64, b = u64::MAX, c = true, d = false, e = 1.0f64, f = 1e21f64,
        g = f64::NAN, h = f64::INFINITY, i = 5e-324f64, j = i128::MIN, k = ?vec!["q\"", "r"],
        "with {} args and \"quotes\"", 2
    );
    let err = Failure;
    tracing::error!(error = &err as &(dyn std::error::Error + 'static), "failed");
    tracing::debug!(target: "other::target", "\u{0}\u{1f}\u{8}\u{c}");
    tracing::info!("");
    let span = tracing::info_span!("outer", id = 7);
    span.in_scope(|| tracing::info!(inside = 1, "in a span"));
    tracing::info!(parent: &span, "explicit parent");
    tracing_log::format_trace(
        &log::Record::builder()
            .args(format_args!("from log \"crate\""))
            .level(log::Level::Warn)
            .target("rustls::x")
            .module_path_static(Some("rustls::x"))
            .file_static(Some("x.rs"))
            .line(Some(3))
            .build(),
    )
    .unwrap();
}

/// The lines of `emit` through the reference format and through ours.
fn both() -> (Vec<String>, Vec<String>) {
    let reference = Lines::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(reference.clone())
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .finish();
    tracing::subscriber::with_default(subscriber, emit);
    let ours = Lines::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(ours.clone())
        .json()
        .event_format(JsonLine::default())
        .finish();
    tracing::subscriber::with_default(subscriber, emit);
    (reference.take(), ours.take())
}

/// A line without its timestamp's value (the two runs are microseconds apart).
fn untimed(line: &str) -> &str {
    let rest = line
        .strip_prefix("{\"timestamp\":\"")
        .unwrap_or_else(|| panic!("no timestamp first: {line}"));
    &rest[rest.find('"').unwrap()..]
}

#[test]
fn lines_are_those_of_tracing_subscribers_json_format() {
    let (reference, ours) = both();
    assert_eq!(reference.len(), 8, "{reference:#?}");
    assert_eq!(ours.len(), reference.len(), "{ours:#?}");
    for (r, o) in reference.iter().zip(&ours) {
        assert_eq!(untimed(o), untimed(r));
        serde_json::from_str::<serde_json::Value>(o).unwrap();
    }
    // The span and log lines went to the reference format itself.
    assert!(ours[5].contains("\"spans\""), "{}", ours[5]);
    assert!(ours[7].contains("\"log.target\""), "{}", ours[7]);
}

#[test]
fn timestamps_have_the_reference_shape() {
    let (reference, ours) = both();
    for (r, o) in reference.iter().zip(&ours) {
        let (r, o) = (&r[14..41], &o[14..41]);
        let shape = |t: &str| {
            t.bytes()
                .map(|b| if b.is_ascii_digit() { b'0' } else { b })
                .collect::<Vec<_>>()
        };
        assert_eq!(shape(o), shape(r), "{o} vs {r}");
        // Same day and hour (the runs are microseconds apart).
        assert_eq!(o[..13], r[..13]);
    }
}

#[test]
fn timestamps_of_known_instants() {
    let cases = [
        (0, 0, "1970-01-01T00:00:00.000000Z"),
        (951_782_400, 1, "2000-02-29T00:00:00.000001Z"),
        (951_868_799, 999_999, "2000-02-29T23:59:59.999999Z"),
        (1_700_000_000, 123_456, "2023-11-14T22:13:20.123456Z"),
        (1_796_291_709, 792_133, "2026-12-03T09:55:09.792133Z"),
        (4_102_444_800, 0, "2100-01-01T00:00:00.000000Z"),
        (4_107_542_400, 0, "2100-03-01T00:00:00.000000Z"),
        (253_402_300_799, 0, "9999-12-31T23:59:59.000000Z"),
        (253_402_300_800, 0, "+10000-01-01T00:00:00.000000Z"),
    ];
    for (secs, micros, want) in cases {
        let mut out = String::new();
        write_timestamp(&mut out, secs, micros).unwrap();
        assert_eq!(out, want, "{secs}");
    }
}
