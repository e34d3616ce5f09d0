//! Metrics and logging. Every metric is named `knative_ha_webhook_*` and
//! carries only bounded labels (docs/server.md lists them).

mod json;
mod writer;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub use json::{JsonFormat, json_format, review_span};
pub use writer::{FlushOnDrop, flush as flush_logs};

/// Prefix of every metric this crate registers.
pub const PREFIX: &str = "knative_ha_webhook";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub kind: &'static str,
    pub operation: &'static str,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `success` or `error`.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: &'static str,
}

/// The server's metrics. Cheap to clone (every metric is an `Arc` inside).
/// What each counts is its help text in [`Metrics::register`] (and
/// docs/server.md's table).
#[derive(Clone, Debug)]
pub struct Metrics {
    pub requests: Family<RequestLabels, Counter>,
    pub request_duration: Family<KindLabels, Histogram>,
    pub patch_operations: Family<KindLabels, Counter>,
    pub policy_reloads: Family<ResultLabels, Counter>,
    pub tls_reloads: Family<ResultLabels, Counter>,
    pub certificate_expiry: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub in_flight: Gauge,
    pub open_connections: Gauge,
    pub connection_errors: Family<ReasonLabels, Counter>,
    pub http_errors: Family<ReasonLabels, Counter>,
    pub ready: Gauge,
    pub policy_synced: Gauge,
}

impl Metrics {
    /// Creates the metrics and registers them in `registry` under their
    /// full `knative_ha_webhook_` names.
    ///
    /// Longer than 80 lines on purpose: one flat registration per metric, in
    /// the order `/metrics` shows them, is the catalogue a reader checks
    /// against docs/server.md; splitting it would scatter that list.
    pub fn register(registry: &mut Registry) -> Metrics {
        let m = Metrics {
            requests: Family::default(),
            request_duration: Family::new_with_constructor(duration_histogram),
            patch_operations: Family::default(),
            policy_reloads: Family::default(),
            tls_reloads: Family::default(),
            certificate_expiry: Gauge::default(),
            in_flight: Gauge::default(),
            open_connections: Gauge::default(),
            connection_errors: Family::default(),
            http_errors: Family::default(),
            ready: Gauge::default(),
            policy_synced: Gauge::default(),
        };
        let n = |s: &str| format!("{PREFIX}_{s}");
        registry.register(
            n("requests"),
            "Admission reviews answered, by kind, operation and outcome",
            m.requests.clone(),
        );
        registry.register(
            n("request_duration_seconds"),
            "Time to answer an admission review",
            m.request_duration.clone(),
        );
        registry.register(
            n("patch_operations"),
            "JSON patch operations returned, by kind",
            m.patch_operations.clone(),
        );
        registry.register(
            n("policy_reloads"),
            "Policy reloads by result",
            m.policy_reloads.clone(),
        );
        registry.register(
            n("tls_reloads"),
            "Certificate reloads by result",
            m.tls_reloads.clone(),
        );
        registry.register(
            n("certificate_expiry_timestamp_seconds"),
            "notAfter of the served certificate (Unix seconds)",
            m.certificate_expiry.clone(),
        );
        registry.register(
            n("requests_in_flight"),
            "Admission reviews being processed",
            m.in_flight.clone(),
        );
        registry.register(
            n("open_connections"),
            "Open HTTPS connections",
            m.open_connections.clone(),
        );
        registry.register(
            n("connection_errors"),
            "HTTPS connections that failed before or while serving, by reason",
            m.connection_errors.clone(),
        );
        registry.register(
            n("http_errors"),
            "HTTPS requests answered with an error status, by reason",
            m.http_errors.clone(),
        );
        registry.register(n("ready"), "1 when /readyz answers 200", m.ready.clone());
        registry.register(
            n("log_lines_dropped"),
            "Log lines dropped because the log writer fell behind",
            writer::DroppedLines,
        );
        registry.register(
            n("build_info"),
            "Always 1; the labels name the running build",
            build_info(),
        );
        registry.register(
            n("policy_synced"),
            "1 when a valid, synced policy snapshot is loaded",
            m.policy_synced.clone(),
        );
        m
    }

    /// Metrics registered in a throw-away registry (tests, tools).
    pub fn unregistered() -> Metrics {
        Metrics::register(&mut Registry::default())
    }

    pub fn policy_reload(&self, ok: bool) {
        reloaded(&self.policy_reloads, ok);
    }

    pub fn tls_reload(&self, ok: bool) {
        reloaded(&self.tls_reloads, ok);
    }

    pub fn http_error(&self, reason: &'static str) {
        let labels = ReasonLabels { reason };
        self.http_errors.get_or_create(&labels).inc();
    }

    pub fn connection_error(&self, reason: &'static str) {
        let labels = ReasonLabels { reason };
        self.connection_errors.get_or_create(&labels).inc();
    }
}

/// Always 1, labelled `version` (the crate version) and, when the build
/// set `KHW_GIT_REVISION`, `revision`.
fn build_info() -> Family<Vec<(&'static str, &'static str)>, Gauge> {
    let mut labels = vec![("version", env!("CARGO_PKG_VERSION"))];
    if let Some(rev) = option_env!("KHW_GIT_REVISION").filter(|r| !r.is_empty()) {
        labels.push(("revision", rev));
    }
    let info = Family::<_, Gauge>::default();
    info.get_or_create(&labels).set(1);
    info
}

fn reloaded(reloads: &Family<ResultLabels, Counter>, ok: bool) {
    let result = if ok { "success" } else { "error" };
    reloads.get_or_create(&ResultLabels { result }).inc();
}

fn duration_histogram() -> Histogram {
    // 0.25 ms .. ~4 s
    Histogram::new(exponential_buckets(0.00025, 2.0, 15))
}

/// Prometheus text exposition of `registry`.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

/// Log output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    #[default]
    Json,
    Text,
}

/// Installs the global tracing subscriber (level from `RUST_LOG`, default
/// `info`), writing to stderr through `tracing-appender`'s non-blocking
/// writer (module `writer`; hold a [`FlushOnDrop`] until the process ends). Does
/// nothing when one is already installed.
pub fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    // kube-client's own request tracing logs every failed request at ERROR
    // (one line per retry while the API server is away); the cluster source
    // logs one warning per outage instead.
    let filter = EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,kube_client::client::builder=off"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer::non_blocking());
    let _ = match format {
        LogFormat::Json => builder.json().event_format(json_format()).try_init(),
        LogFormat::Text => {
            // Colours only on a terminal: never escape codes in files or pipes.
            use std::io::IsTerminal;
            builder
                .with_ansi(std::io::stderr().is_terminal())
                .try_init()
        }
    };
}

/// `text` cut to at most `max` bytes (at a character boundary), with a
/// note of how much was left out: `...(N bytes more)`. The one way this
/// crate shortens text for people (log lines, error messages, Event notes).
pub fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...({} bytes more)", &text[..end], text.len() - end)
}

/// Request content made safe for a log line in any format: clipped to
/// `max` bytes, control characters (newlines, ANSI escapes) written as
/// `\u{..}` escapes so that a value can neither forge a line nor colour one.
/// Borrows `text` when it is short and clean (the usual case).
pub fn loggable(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max && !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let clipped = clip(text, max);
    if !clipped.chars().any(char::is_control) {
        return clipped.into();
    }
    clipped
        .chars()
        .map(|c| {
            if c.is_control() {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests;
