//! YAML input for the command line: multi-document files split with the
//! line each document starts on, and parse errors in a user's words with
//! line numbers counted from the top of the FILE (not of the document).

use std::borrow::Cow;

use serde_json::Value;
use serde_saphyr::{Error, MessageFormatter, UserMessageFormatter};

/// One document of a multi-document YAML file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlDoc {
    /// 1-based index of the document in its file (comment-only documents
    /// count, as a reader counts them).
    pub index: usize,
    /// 1-based line of the file the document's text starts on.
    pub line: usize,
    pub text: String,
}

/// A YAML syntax error: what is wrong and where in the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", describe_parts(*line, *column, message))]
pub struct YamlError {
    /// 1-based file line, when known.
    pub line: Option<u64>,
    pub column: Option<u64>,
    pub message: String,
}

fn describe_parts(line: Option<u64>, column: Option<u64>, message: &str) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!("line {l}, column {c}: {message}"),
        (Some(l), None) => format!("line {l}: {message}"),
        _ => message.to_string(),
    }
}

fn is_marker(line: &str) -> bool {
    line.strip_prefix("---")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\n', '\r']))
}

fn has_content(text: &str) -> bool {
    text.lines().any(|l| {
        let t = l.trim();
        !t.is_empty() && !t.starts_with('#') && t != "..."
    })
}

/// Splits multi-document YAML, keeping each document's first line (also
/// behind [`crate::policy::split_documents`]).
pub fn documents(text: &str) -> Vec<YamlDoc> {
    let mut docs = Vec::new();
    let mut current = String::new();
    let mut start = 1;
    let mut index = 1;
    let mut seen = false;
    for (n, line) in text.split_inclusive('\n').enumerate() {
        let lineno = n + 1;
        if is_marker(line) {
            if seen {
                if has_content(&current) {
                    docs.push(YamlDoc {
                        index,
                        line: start,
                        text: std::mem::take(&mut current),
                    });
                }
                index += 1;
            }
            current.clear();
            seen = true;
            start = lineno;
            let rest = line[3..].trim_start_matches([' ', '\t']);
            if rest.trim().is_empty() || rest.trim_start().starts_with('#') {
                start = lineno + 1;
            } else {
                current.push_str(rest);
            }
            continue;
        }
        let t = line.trim();
        if !t.is_empty() && !t.starts_with('#') && !t.starts_with('%') {
            seen = true;
        }
        current.push_str(line);
    }
    if has_content(&current) {
        docs.push(YamlDoc {
            index,
            line: start,
            text: current,
        });
    }
    docs
}

/// Our wording for the messages whose library text speaks to programmers.
struct Words;

impl MessageFormatter for Words {
    fn format_message<'a>(&self, err: &'a Error) -> Cow<'a, str> {
        match err.without_snippet() {
            Error::NullIntoString { .. } => {
                Cow::Borrowed("an empty value (null) where a name or text is expected")
            }
            Error::DuplicateMappingKey { key, .. } => Cow::Owned(format!(
                "key {}appears twice in the same mapping (two objects without a `---` line between them?)",
                key.as_ref().map(|k| format!("{k:?} ")).unwrap_or_default()
            )),
            Error::MultipleDocuments { .. } => {
                Cow::Borrowed("several documents where one is expected")
            }
            other => UserMessageFormatter.format_message(other),
        }
    }
}

/// The error in our words, lines shifted by `line_offset` (the number of
/// file lines before the document).
pub fn error(err: &Error, line_offset: usize) -> YamlError {
    let location = err.location();
    YamlError {
        line: location.map(|l| l.line() + line_offset as u64),
        column: location.map(|l| l.column()),
        message: Words.format_message(err).into_owned(),
    }
}

/// Parses one document into a JSON value.
pub fn parse(doc: &YamlDoc) -> Result<Value, YamlError> {
    serde_saphyr::from_str(&doc.text).map_err(|e| error(&e, doc.line.saturating_sub(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_keep_their_file_line() {
        let docs = documents("# c\n---\na: 1\n---\n\n---\nb: 2\nc: 3\n--- {d: 4}\n");
        let got: Vec<(usize, usize)> = docs.iter().map(|d| (d.index, d.line)).collect();
        assert_eq!(got, vec![(1, 3), (3, 7), (4, 9)]);
        assert_eq!(docs[2].text, "{d: 4}\n");
        assert_eq!(
            documents("a: 1\n")
                .iter()
                .map(|d| d.line)
                .collect::<Vec<_>>(),
            vec![1]
        );
    }

    #[test]
    fn errors_count_lines_from_the_file_and_avoid_library_jargon() {
        let text = "a: 1\n---\nkind: x\nmetadata: {name: a}\nkind: y\n";
        let docs = documents(text);
        let err = parse(&docs[1]).unwrap_err();
        assert_eq!(err.line, Some(5), "{err}");
        assert!(err.message.contains("\"kind\" appears twice"), "{err}");
        assert!(!err.to_string().contains("DuplicateKeyPolicy"), "{err}");
    }
}
