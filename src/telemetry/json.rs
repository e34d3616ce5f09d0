//! The JSON log line, and the span of one review whose fields it lifts to
//! its top level.

use std::fmt::Write as _;

use serde::de::IgnoredAny;
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{Format, Json, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

const REVIEW_SPAN: &str = "review";

/// The span of one review (`POST /mutate` or `/validate`), entered by the
/// server for the whole review; its fields are recorded once the review is
/// answered (none for a body that is not a usable review).
pub fn review_span() -> tracing::Span {
    use tracing::field::Empty;
    let (uid, kind, namespace, name, operation) = (Empty, Empty, Empty, Empty, Empty);
    tracing::info_span!(REVIEW_SPAN, uid, kind, namespace, name, operation)
}

/// The JSON log line: `tracing-subscriber`'s JSON format with the event's
/// fields flattened and without the current span, that is
/// `{"timestamp", "level", "message", the fields in order, "target"}` (an
/// event inside a span adds `"spans"`). A line written inside the
/// [`review_span`] has that span's recorded fields at its top level instead,
/// after `"message"`, in the span's order. docs/server.md and the tests read
/// these keys.
pub fn json_format() -> JsonFormat {
    let format = tracing_subscriber::fmt::format()
        .json()
        .flatten_event(true)
        .with_current_span(false);
    JsonFormat {
        in_review: format.clone().with_span_list(false),
        format,
    }
}

/// See [`json_format`].
pub struct JsonFormat {
    format: Format<Json>,
    in_review: Format<Json>,
}

impl<S, N> FormatEvent<S, N> for JsonFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut out: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let Some(span) = ctx.parent_span().filter(|s| s.name() == REVIEW_SPAN) else {
            return self.format.format_event(ctx, out, event);
        };
        let mut line = String::new();
        let written = Writer::new(&mut line);
        self.in_review.format_event(ctx, written, event)?;
        // The span's fields as the JSON format keeps them: one object.
        let extensions = span.extensions();
        let recorded: serde_json::Map<String, serde_json::Value> = extensions
            .get::<FormattedFields<N>>()
            .and_then(|f| serde_json::from_str(f).ok())
            .unwrap_or_default();
        let mut fields = String::new();
        for field in span.fields() {
            if let Some(value) = recorded.get(field.name()) {
                write!(fields, ",\"{field}\":{value}")?;
            }
        }
        // After the value of "message", the first field (or of "level").
        let key = |k: &str| line.find(k).map(|at| at + k.len());
        let at = key("\"message\":").or_else(|| key("\"level\":"));
        let at = at.unwrap_or_default();
        let mut value = serde_json::Deserializer::from_str(&line[at..]).into_iter::<IgnoredAny>();
        let _ = value.next();
        let at = at + value.byte_offset();
        out.write_str(&line[..at])?;
        out.write_str(&fields)?;
        out.write_str(&line[at..])
    }
}
