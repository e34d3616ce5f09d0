//! Records RFC 6902 operations while mutating a copy of the object, so the
//! patch and the mutated object can never disagree. Every operation's parent
//! exists when it is applied (missing parents are created by one `add` of
//! the nested value), and pointers are escaped (`~0`, `~1`).

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, PatchOperation, RemoveOperation, ReplaceOperation};
use serde_json::map::Entry;
use serde_json::{Map, Value};

/// Why a write cannot be made where the object's shape puts it (paths are
/// shown as dotted field paths, `spec.template`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// A path walks through a list element that is not there (elements
    /// are walked through, never created).
    #[error("{list} has no element {key}")]
    NoElement { list: String, key: String },
    /// A parent on the path holds something other than an object.
    #[error("{path} is not an object")]
    NotAnObject { path: String },
    #[error("empty path")]
    EmptyPath,
    #[error("{path} is not a list")]
    NotAList { path: String },
    #[error("{path}[{index}] does not exist")]
    NoIndex { path: String, index: usize },
}

/// A mutable copy of an object plus the operations that produced it.
#[derive(Debug)]
pub struct Patcher {
    pub doc: Value,
    pub ops: Vec<PatchOperation>,
}

pub fn pointer(path: &[&str]) -> PointerBuf {
    PointerBuf::from_tokens(path.iter().copied())
}

fn nested(rest: &[&str], value: Value) -> Value {
    rest.iter().rev().fold(value, |acc, key| {
        let mut map = Map::new();
        map.insert((*key).to_string(), acc);
        Value::Object(map)
    })
}

impl Patcher {
    pub fn new(original: &Value) -> Patcher {
        Patcher {
            doc: original.clone(),
            ops: Vec::new(),
        }
    }

    /// Sets the member at `path` (object keys, or indexes of existing list
    /// elements) to `value`, creating missing parents. Returns whether
    /// anything changed.
    pub fn set(&mut self, path: &[&str], value: Value) -> Result<bool, PatchError> {
        let mut cur = &mut self.doc;
        for (i, key) in path.iter().enumerate() {
            let (slot, in_object) = match cur {
                // Existing list elements can be walked through (never created).
                Value::Array(items) => {
                    let item = key.parse::<usize>().ok().and_then(|n| items.get_mut(n));
                    let item = item.ok_or_else(|| PatchError::NoElement {
                        list: path[..i].join("."),
                        key: (*key).to_string(),
                    })?;
                    (item, false)
                }
                Value::Object(map) => match map.entry(*key) {
                    Entry::Vacant(entry) => {
                        let v = nested(&path[i + 1..], value);
                        entry.insert(v.clone());
                        self.ops.push(PatchOperation::Add(AddOperation {
                            path: pointer(&path[..=i]),
                            value: v,
                        }));
                        return Ok(true);
                    }
                    Entry::Occupied(entry) => (entry.into_mut(), true),
                },
                _ => {
                    return Err(PatchError::NotAnObject {
                        path: path[..i].join("."),
                    });
                }
            };
            // `affinity: null`, `data: null`: the null member is replaced by
            // the nested value.
            if i + 1 == path.len() || (in_object && slot.is_null()) {
                let v = nested(&path[i + 1..], value);
                if *slot == v {
                    return Ok(false);
                }
                *slot = v.clone();
                self.ops.push(PatchOperation::Replace(ReplaceOperation {
                    path: pointer(&path[..=i]),
                    value: v,
                }));
                return Ok(true);
            }
            cur = slot;
        }
        Err(PatchError::EmptyPath)
    }

    /// Removes the object member at `path` if present (the parents may
    /// be list elements, by index).
    pub fn remove(&mut self, path: &[&str]) -> bool {
        let Some((last, parents)) = path.split_last() else {
            return false;
        };
        let removed = self
            .get_mut(parents)
            .and_then(Value::as_object_mut)
            .and_then(|m| m.remove(*last))
            .is_some();
        if removed {
            self.ops.push(PatchOperation::Remove(RemoveOperation {
                path: pointer(path),
            }));
        }
        removed
    }

    /// Removes `path`, then the parents below the top level that it left
    /// empty. (A pod template's `metadata` still holding the labels is never
    /// removed with the hash.)
    pub fn remove_pruned(&mut self, path: &[&str]) {
        if !self.remove(path) {
            return;
        }
        for depth in (2..path.len()).rev() {
            let parent = &path[..depth];
            let value = parent
                .iter()
                .try_fold(&self.doc, |cur, key| cur.as_object()?.get(*key));
            if !value.is_some_and(|v| v.as_object().is_some_and(Map::is_empty)) {
                return;
            }
            self.remove(parent);
        }
    }

    /// Removes the annotation `key` ([`Patcher::remove_pruned`]).
    pub fn remove_annotation(&mut self, key: &str) {
        self.remove_pruned(&["metadata", "annotations", key]);
    }

    /// Mutable access to the value at `path` (object keys or array indexes).
    pub fn get_mut(&mut self, path: &[&str]) -> Option<&mut Value> {
        let mut cur = &mut self.doc;
        for key in path {
            cur = match cur {
                Value::Object(m) => m.get_mut(*key)?,
                Value::Array(a) => a.get_mut(key.parse::<usize>().ok()?)?,
                _ => return None,
            };
        }
        Some(cur)
    }

    /// Appends `value` to the array at `path` (which must exist), using an
    /// explicit index rather than `-`.
    pub fn push(&mut self, path: &[&str], value: Value) -> Result<(), PatchError> {
        let Some(Value::Array(items)) = self.get_mut(path) else {
            return Err(PatchError::NotAList {
                path: path.join("."),
            });
        };
        let index = items.len().to_string();
        items.push(value.clone());
        let mut full: Vec<&str> = path.to_vec();
        full.push(&index);
        self.ops.push(PatchOperation::Add(AddOperation {
            path: pointer(&full),
            value,
        }));
        Ok(())
    }

    /// Removes element `index` of the array at `path`.
    pub fn remove_index(&mut self, path: &[&str], index: usize) -> Result<(), PatchError> {
        let Some(Value::Array(items)) = self.get_mut(path) else {
            return Err(PatchError::NotAList {
                path: path.join("."),
            });
        };
        if index >= items.len() {
            return Err(PatchError::NoIndex {
                path: path.join("."),
                index,
            });
        }
        items.remove(index);
        let idx = index.to_string();
        let mut full: Vec<&str> = path.to_vec();
        full.push(&idx);
        self.ops.push(PatchOperation::Remove(RemoveOperation {
            path: pointer(&full),
        }));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn set_creates_missing_parents_with_one_add() {
        let mut p = Patcher::new(&json!({"spec": {}}));
        assert_eq!(
            p.set(&["spec", "template", "spec", "x"], json!(1)),
            Ok(true)
        );
        assert_eq!(p.ops.len(), 1);
        let patch = serde_json::to_value(&p.ops).unwrap();
        assert_eq!(
            patch,
            json!([{"op": "add", "path": "/spec/template", "value": {"spec": {"x": 1}}}])
        );
        assert_eq!(p.doc, json!({"spec": {"template": {"spec": {"x": 1}}}}));
    }

    #[test]
    fn set_same_value_is_no_op_and_different_value_replaces() {
        let mut p = Patcher::new(&json!({"a": {"b": 2}}));
        assert_eq!(p.set(&["a", "b"], json!(2)), Ok(false));
        assert!(p.ops.is_empty());
        assert_eq!(p.set(&["a", "b"], json!(3)), Ok(true));
        assert_eq!(
            serde_json::to_value(&p.ops).unwrap(),
            json!([{"op": "replace", "path": "/a/b", "value": 3}])
        );
    }

    #[test]
    fn pointers_escape_slash_and_tilde() {
        let mut p = Patcher::new(&json!({"data": {}}));
        p.set(&["data", "a/b~c"], json!("v")).unwrap();
        assert_eq!(
            serde_json::to_value(&p.ops).unwrap(),
            json!([{"op": "add", "path": "/data/a~1b~0c", "value": "v"}])
        );
    }

    #[test]
    fn set_replaces_a_null_parent() {
        let mut p = Patcher::new(&json!({"data": null}));
        assert_eq!(p.set(&["data", "buckets"], json!("5")), Ok(true));
        assert_eq!(
            serde_json::to_value(&p.ops).unwrap(),
            json!([{"op": "replace", "path": "/data", "value": {"buckets": "5"}}])
        );
        assert_eq!(p.doc, json!({"data": {"buckets": "5"}}));
    }

    #[test]
    fn set_through_a_non_object_is_an_error() {
        let mut p = Patcher::new(&json!({"spec": "oops"}));
        assert!(
            p.set(&["spec", "replicas"], json!(1))
                .unwrap_err()
                .to_string()
                .contains("spec")
        );
    }

    #[test]
    fn each_refused_write_is_its_own_variant() {
        let mut p = Patcher::new(&json!({"spec": {"args": ["a"], "n": 1}}));
        let cases = [
            (
                p.set(&["spec", "n", "x"], json!(1)).unwrap_err(),
                PatchError::NotAnObject {
                    path: "spec.n".into(),
                },
                "spec.n is not an object",
            ),
            (
                p.set(&["spec", "args", "3"], json!("b")).unwrap_err(),
                PatchError::NoElement {
                    list: "spec.args".into(),
                    key: "3".into(),
                },
                "spec.args has no element 3",
            ),
            (
                p.push(&["spec", "n"], json!(2)).unwrap_err(),
                PatchError::NotAList {
                    path: "spec.n".into(),
                },
                "spec.n is not a list",
            ),
            (
                p.remove_index(&["spec", "args"], 1).unwrap_err(),
                PatchError::NoIndex {
                    path: "spec.args".into(),
                    index: 1,
                },
                "spec.args[1] does not exist",
            ),
        ];
        for (got, want, text) in cases {
            assert_eq!(got.to_string(), text);
            assert_eq!(got, want);
        }
        assert!(p.ops.is_empty(), "a refused write records nothing");
    }
}
