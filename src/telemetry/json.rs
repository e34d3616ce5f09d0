//! The JSON log line, written straight into the line buffer.
//!
//! Every event outside a span that is not a `log` record (all of this
//! crate's own events, the per-review line among them) is written here:
//! the same keys, order and values as `tracing-subscriber`'s JSON format
//! with `flatten_event(true)` and `with_current_span(false)`
//! (`{"timestamp", "level", the fields in order, "target"}`), without its
//! serde machinery (a `String` for the timestamp, a UTF-8 check per write,
//! one `fmt` call per key and quote). Anything else (an event inside a span,
//! a `log` record with its normalised metadata) goes to that format itself,
//! so the output never differs. The tests compare both on the same events.

use std::fmt::{self, Write as _};
use std::time::{SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_log::NormalizeEvent;
use tracing_subscriber::fmt::format::{Format, Json, JsonFields, Writer};
use tracing_subscriber::fmt::time::SystemTime as SystemTimer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent};
use tracing_subscriber::registry::LookupSpan;

/// The JSON event format of `serve` and the other commands.
pub struct JsonLine {
    /// The reference format, for what the fast path does not write.
    inner: Format<Json, SystemTimer>,
}

impl Default for JsonLine {
    fn default() -> Self {
        JsonLine {
            inner: tracing_subscriber::fmt::format()
                .json()
                .flatten_event(true)
                .with_current_span(false),
        }
    }
}

impl<S> FormatEvent<S, JsonFields> for JsonLine
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let in_span = event.parent().is_some() || ctx.lookup_current().is_some();
        // The clock is read only for a line written here (the reference
        // format reads its own).
        let now = (!in_span && !event.is_log())
            .then(|| SystemTime::now().duration_since(UNIX_EPOCH).ok())
            .flatten();
        match now {
            Some(now) => {
                let meta = event.metadata();
                writer.write_str("{\"timestamp\":\"")?;
                write_timestamp(&mut writer, now.as_secs(), now.subsec_micros())?;
                writer.write_str("\",\"level\":\"")?;
                writer.write_str(meta.level().as_str())?;
                writer.write_char('"')?;
                let mut fields = Fields {
                    out: &mut writer,
                    result: Ok(()),
                };
                event.record(&mut fields);
                fields.result?;
                writer.write_str(",\"target\":")?;
                write_string(&mut writer, meta.target())?;
                writer.write_str("}\n")
            }
            None => self.inner.format_event(ctx, writer, event),
        }
    }
}

/// Writes each field as `,"name":value`, as `tracing-serde`'s map visitor
/// serialises it (numbers and booleans as JSON numbers and booleans, `f64`
/// as `serde_json` prints it, everything else as its `Debug` text).
struct Fields<'w, 'b> {
    out: &'w mut Writer<'b>,
    result: fmt::Result,
}

impl Fields<'_, '_> {
    fn entry(&mut self, field: &Field, value: impl FnOnce(&mut Writer<'_>) -> fmt::Result) {
        if self.result.is_ok() {
            self.result = (|| {
                self.out.write_char(',')?;
                write_string(self.out, field.name())?;
                self.out.write_char(':')?;
                value(self.out)
            })();
        }
    }
}

impl Visit for Fields<'_, '_> {
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.entry(field, |w| w.write_str(if value { "true" } else { "false" }));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.entry(field, |w| {
            w.write_char('"')?;
            write!(Escaped(&mut *w), "{value:?}")?;
            w.write_char('"')
        });
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.entry(field, |w| write!(w, "{value}"));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.entry(field, |w| write!(w, "{value}"));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.entry(field, |w| {
            // serde_json: the shortest round-trip text, `null` if not finite.
            if value.is_finite() {
                w.write_str(zmij::Buffer::new().format_finite(value))
            } else {
                w.write_str("null")
            }
        });
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.entry(field, |w| write_string(w, value));
    }
}

/// `"text"`, escaped as `serde_json` escapes it.
fn write_string(out: &mut impl fmt::Write, text: &str) -> fmt::Result {
    out.write_char('"')?;
    Escaped(&mut *out).write_str(text)?;
    out.write_char('"')
}

/// Escapes what is written through it as the inside of a JSON string, as
/// `serde_json` does: `"` `\` and the controls below U+0020 (`\n`, `\t`,
/// `\r`, `\b`, `\f`, else `\u00xx`); everything else as is.
struct Escaped<W>(W);

impl<W: fmt::Write> fmt::Write for Escaped<W> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let bytes = text.as_bytes();
        // The usual case: nothing to escape (one table lookup per byte).
        if !bytes.iter().any(|&b| NEEDS_ESCAPE[usize::from(b)]) {
            return self.0.write_str(text);
        }
        let mut start = 0;
        for (i, &b) in bytes.iter().enumerate() {
            let short = match b {
                b'"' => "\\\"",
                b'\\' => "\\\\",
                b'\n' => "\\n",
                b'\r' => "\\r",
                b'\t' => "\\t",
                0x08 => "\\b",
                0x0c => "\\f",
                0..=0x1f => "",
                _ => continue,
            };
            // Escaped bytes are ASCII: `i` is a character boundary.
            self.0.write_str(&text[start..i])?;
            if short.is_empty() {
                let hex = [HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]];
                self.0.write_str("\\u00")?;
                // Two ASCII hex digits.
                self.0
                    .write_str(std::str::from_utf8(&hex).map_err(|_| fmt::Error)?)?;
            } else {
                self.0.write_str(short)?;
            }
            start = i + 1;
        }
        self.0.write_str(&text[start..])
    }
}

/// The bytes [`Escaped`] escapes: `"`, `\\` and the controls below U+0020.
const NEEDS_ESCAPE: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = true;
        b += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

/// `YYYY-MM-DDTHH:MM:SS.ffffffZ` (UTC, microseconds), as the `SystemTime`
/// timer of `tracing-subscriber` prints it (from 1970 on; `+YYYYY` after 9999).
fn write_timestamp(out: &mut impl fmt::Write, secs: u64, micros: u32) -> fmt::Result {
    let (year, month, day) = civil_from_days(secs / 86_400);
    let rest = secs % 86_400;
    let mut text = *b"YYYY-MM-DDTHH:MM:SS.ffffffZ";
    put(&mut text[0..4], year);
    put(&mut text[5..7], month);
    put(&mut text[8..10], day);
    put(&mut text[11..13], rest / 3600);
    put(&mut text[14..16], rest / 60 % 60);
    put(&mut text[17..19], rest % 60);
    put(&mut text[20..26], u64::from(micros));
    let mut text = &text[..];
    if year > 9999 {
        write!(out, "+{year}")?;
        text = &text[4..];
    }
    // Only ASCII digits were written into ASCII text.
    out.write_str(std::str::from_utf8(text).map_err(|_| fmt::Error)?)
}

/// `value`'s last `slot.len()` decimal digits, zero-padded, into `slot`.
fn put(slot: &mut [u8], mut value: u64) {
    for b in slot.iter_mut().rev() {
        *b = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`, for days on or after the epoch).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests;
