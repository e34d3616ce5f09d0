//! How an error is shown.
//!
//! One convention for every error type of this crate: the message names
//! the operation (`reading policy file /p.yaml`), the cause lives only in
//! `#[source]`, and the one place that prints an error, at the top of a
//! command or in a log record, prints the chain once with [`Chain`].
//! A value in a message is shown shortened ([`show`]).

use std::error::Error;
use std::fmt;

/// An error and its causes, `: `-separated: `reading /p.yaml: no such file`.
///
/// A foreign error (kube's, hyper's) that already repeats its source in its
/// own message is not printed twice: a cause whose text the line already
/// holds is left out. This crate's own messages never hold their cause.
pub struct Chain<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut line = self.0.to_string();
        let mut cause = self.0.source();
        while let Some(error) = cause {
            let text = error.to_string();
            if !text.is_empty() && !line.contains(&text) {
                line.push_str(": ");
                line.push_str(&text);
            }
            cause = error.source();
        }
        f.write_str(&line)
    }
}

/// The chain of `error` as one line ([`Chain`]).
pub fn chain(error: &(dyn Error + 'static)) -> String {
    Chain(error).to_string()
}

/// Renders a value for an error message: its JSON, clipped to
/// [`SHOW_BYTES`] ([`crate::telemetry::clip`]).
pub fn show(value: &serde_json::Value) -> String {
    crate::telemetry::clip(&value.to_string(), SHOW_BYTES)
}

/// How much of a value [`show`] writes.
pub const SHOW_BYTES: usize = 60;

/// A library's error told in the user's words (`connection refused`,
/// `no such file`, `not valid YAML: line 3 ...`), standing as the cause
/// where the library's own text says less, or says it twice.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct InWords(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("restoring namespace {namespace}")]
    struct Outer {
        namespace: String,
        #[source]
        source: Middle,
    }

    #[derive(Debug, thiserror::Error)]
    #[error("patching Deployment knative-serving/activator")]
    struct Middle {
        #[source]
        source: std::io::Error,
    }

    /// A foreign error that repeats its cause in its own text, as kube's do.
    #[derive(Debug, thiserror::Error)]
    #[error("HyperError: {0}")]
    struct Repeats(#[source] std::io::Error);

    fn nested() -> Outer {
        Outer {
            namespace: "knative-serving".into(),
            source: Middle {
                source: std::io::Error::other("connection reset"),
            },
        }
    }

    #[test]
    fn every_cause_is_printed_once_in_order() {
        let line = chain(&nested());
        assert_eq!(
            line,
            "restoring namespace knative-serving: patching Deployment \
             knative-serving/activator: connection reset"
        );
        for part in ["restoring", "patching", "connection reset"] {
            assert_eq!(line.matches(part).count(), 1, "{part} in {line}");
        }
    }

    #[test]
    fn own_messages_do_not_hold_their_cause() {
        let outer = nested();
        assert!(!outer.to_string().contains("patching"));
        assert!(!outer.source.to_string().contains("connection reset"));
    }

    #[test]
    fn a_value_is_shown_whole_or_clipped_as_log_lines_are() {
        assert_eq!(show(&serde_json::json!({"a": 1})), r#"{"a":1}"#);
        let long = serde_json::Value::String("x".repeat(100));
        assert_eq!(
            show(&long),
            format!("\"{}...(42 bytes more)", "x".repeat(SHOW_BYTES - 1))
        );
    }

    #[test]
    fn a_foreign_cause_that_repeats_its_source_is_not_printed_twice() {
        let line = chain(&Repeats(std::io::Error::other("broken pipe")));
        assert_eq!(line, "HyperError: broken pipe");
    }
}
