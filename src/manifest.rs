//! Kubernetes manifests as the command line reads them: multi-document
//! YAML, where a document may be a `kind: List` or a typed `…List` (what
//! `kubectl get -o yaml` prints); their items are expanded in order.

use std::io::Read;
use std::path::Path;

use serde_json::Value;

use crate::yaml::{self, YamlError};

/// One object of an input file.
#[derive(Debug, Clone)]
pub struct Document {
    /// File name as given (`<stdin>` for standard input).
    pub file: String,
    /// 1-based index of the document in its file.
    pub index: usize,
    /// 1-based index in the document's `items` when it came from a list.
    pub item: Option<usize>,
    pub value: Value,
}

impl Document {
    /// `FILE: document N` or `FILE: document N, item M`.
    pub fn display(&self) -> String {
        match self.item {
            Some(i) => format!("{}: document {}, item {i}", self.file, self.index),
            None => format!("{}: document {}", self.file, self.index),
        }
    }
}

/// Why a manifest file could not be read as Kubernetes objects.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{file}: document {index}: invalid YAML")]
    Yaml {
        file: String,
        index: usize,
        #[source]
        source: YamlError,
    },
    #[error("{place}: not a Kubernetes object (a mapping with apiVersion and kind), got {got}")]
    NotAnObject { place: String, got: String },
}

/// Why an input file could not be read, in the user's words.
#[derive(Debug, thiserror::Error)]
pub enum Unreadable {
    #[error("no such file")]
    NotFound,
    #[error("it is a directory")]
    Directory,
    #[error("permission denied")]
    PermissionDenied,
    #[error("not UTF-8 (an invalid byte at line {line}, column {column})")]
    NotUtf8 { line: usize, column: usize },
    #[error(transparent)]
    Io(std::io::Error),
}

/// An input file (or standard input) that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("<stdin>: cannot read standard input")]
    Stdin(#[source] Unreadable),
    #[error("{file}: cannot read file")]
    File {
        file: String,
        #[source]
        reason: Unreadable,
    },
}

impl From<std::io::Error> for Unreadable {
    fn from(error: std::io::Error) -> Unreadable {
        match error.kind() {
            std::io::ErrorKind::NotFound => Unreadable::NotFound,
            std::io::ErrorKind::IsADirectory => Unreadable::Directory,
            std::io::ErrorKind::PermissionDenied => Unreadable::PermissionDenied,
            _ => Unreadable::Io(error),
        }
    }
}

/// The bytes as text, or where the first byte that is not UTF-8 is
/// (1-based line and byte column).
fn utf8(bytes: Vec<u8>) -> Result<String, Unreadable> {
    String::from_utf8(bytes).map_err(|e| {
        let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
        let line_start = valid.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        Unreadable::NotUtf8 {
            line: valid.iter().filter(|&&b| b == b'\n').count() + 1,
            column: valid.len() - line_start + 1,
        }
    })
}

/// Reads a file, or standard input for `-`: `(name for messages, text)`.
pub fn read_input(path: &Path) -> Result<(String, String), ReadError> {
    if path.as_os_str() == "-" {
        let mut bytes = Vec::new();
        let read = std::io::stdin()
            .read_to_end(&mut bytes)
            .map_err(Unreadable::from);
        let text = read.and_then(|_| utf8(bytes)).map_err(ReadError::Stdin)?;
        return Ok(("<stdin>".to_string(), text));
    }
    let file = path.display().to_string();
    let read = if path.is_dir() {
        Err(Unreadable::Directory)
    } else {
        std::fs::read(path).map_err(Unreadable::from).and_then(utf8)
    };
    match read {
        Ok(text) => Ok((file, text)),
        Err(reason) => Err(ReadError::File { file, reason }),
    }
}

/// `List`, `DeploymentList`, ...: a kind ending in `List` with an `items` array.
pub(crate) fn is_list(value: &Value) -> bool {
    value
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k.ends_with("List"))
        && value.get("items").is_some_and(Value::is_array)
}

/// The items of a list; items of a typed list (`DeploymentList`) get the
/// list's apiVersion and the item kind when they lack them, as the API
/// server omits them there.
pub(crate) fn list_items(list: &Value) -> Vec<Value> {
    let kind = list["kind"].as_str().unwrap_or("");
    let item_kind = kind.strip_suffix("List").filter(|k| !k.is_empty());
    let api_version = list.get("apiVersion").cloned();
    let mut items = list["items"].as_array().cloned().unwrap_or_default();
    if let Some(item_kind) = item_kind {
        for item in items.iter_mut().filter(|i| i.is_object()) {
            if item.get("kind").is_none() {
                item["kind"] = Value::from(item_kind);
            }
            if item.get("apiVersion").is_none()
                && let Some(v) = &api_version
            {
                item["apiVersion"] = v.clone();
            }
        }
    }
    items
}

/// Parses multi-document YAML into Kubernetes objects, lists expanded.
/// Empty documents are skipped; anything else that is not an object is an
/// error naming the file, the document (and item) and the line.
pub fn parse_manifests(file: &str, text: &str) -> Result<Vec<Document>, ManifestError> {
    let mut docs = Vec::new();
    for doc in yaml::documents(text) {
        let value = yaml::parse(&doc).map_err(|source| ManifestError::Yaml {
            file: file.to_string(),
            index: doc.index,
            source,
        })?;
        let items = if is_list(&value) {
            list_items(&value)
                .into_iter()
                .enumerate()
                .map(|(i, v)| (Some(i + 1), v))
                .collect()
        } else {
            vec![(None, value)]
        };
        for (item, value) in items {
            let d = Document {
                file: file.to_string(),
                index: doc.index,
                item,
                value,
            };
            let is_string = |key| d.value.get(key).is_some_and(Value::is_string);
            if !(is_string("apiVersion") && is_string("kind")) {
                return Err(ManifestError::NotAnObject {
                    place: d.display(),
                    got: crate::errors::show(&d.value),
                });
            }
            docs.push(d);
        }
    }
    Ok(docs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_are_expanded_in_order_and_typed_items_get_their_kind() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Secret, metadata: {name: b}}\n---\napiVersion: apps/v1\nkind: DeploymentList\nitems:\n- metadata: {name: c}\n";
        let docs = parse_manifests("f.yaml", text).unwrap();
        let got: Vec<(usize, Option<usize>, &str, &str)> = docs
            .iter()
            .map(|d| {
                (
                    d.index,
                    d.item,
                    d.value["kind"].as_str().unwrap(),
                    d.value["apiVersion"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (1, None, "ConfigMap", "v1"),
                (2, Some(1), "Secret", "v1"),
                (3, Some(1), "Deployment", "apps/v1"),
            ]
        );
    }

    #[test]
    fn a_bad_item_names_the_document_and_the_item() {
        let err =
            parse_manifests("f.yaml", "apiVersion: v1\nkind: List\nitems:\n- 3\n").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("f.yaml: document 1, item 1: not a Kubernetes object"),
            "{err}"
        );
    }
}
