//! The engine's view of an object: a `serde_json::Value` holding only the
//! paths the engine reads or writes, parsed straight from JSON text. Every
//! other member is skipped while parsing (`serde::de::IgnoredAny`: scanned,
//! never built), so a large object costs a scan, not a tree.
//!
//! The paths are not named here: each engine module that reads an object
//! lists what it reads or writes (its `READS`, a list of `Read`s; a kind's
//! handler's is in its `kinds::KINDS` entry) from the same path constants
//! it reads through, and the view's shape is built from those lists once,
//! at first use.
//!
//! The engine's answer (patch and change lines) on the view equals its
//! answer on the whole object (`tests/it/engine_view.rs` checks it on every
//! Knative v1.23.0 object, under fixed and random policies, and on
//! arbitrary and mutated ones: a path the engine reads that no module's
//! `READS` lists turns it red), because:
//! - every path the engine reads or writes is kept, with the whole value
//!   where the engine compares, copies or shows it (`Read::Whole`);
//! - a node whose JSON type is not the one the shape expects (an array where
//!   an object was expected, ...) is kept whole, so type errors and the
//!   values they show are the same;
//! - array elements are all kept (pruned each), so indexes in patch paths
//!   stay right; duplicate keys keep the last value, as `Value` does;
//! - of an object whose members are pruned, the first member left out
//!   stays, as null: a map is empty in the view only when it is empty in
//!   the object, so the engine never removes a parent it emptied of what
//!   it sees.
//!
//! The view is one shape for all four governed kinds (their paths barely
//! overlap), so it needs no look at `apiVersion`/`kind` first. The mutated
//! object `mutate_object` returns is the view's, not the original's: use the
//! view only for [`super::outcome`] (the patch and the change lines).

use std::borrow::Cow;
use std::fmt;
use std::sync::OnceLock;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::{budgets, leader, records, restore, target};

use super::reads::{Path, Read};

/// The reads of the modules every kind's handler shares; each kind's own
/// are in its [`super::kinds::KINDS`] entry. Together: what the view keeps
/// of any object.
const SHARED: &[&[Read]] = &[
    super::READS,
    target::READS,
    leader::READS,
    budgets::READS,
    records::READS,
];

/// Every module's reads.
fn engine_reads() -> impl Iterator<Item = &'static [Read]> {
    SHARED
        .iter()
        .copied()
        .chain(super::kinds::KINDS.iter().map(|k| k.reads))
}

/// What to keep of a JSON node.
#[derive(Debug, PartialEq)]
enum Shape {
    /// The whole value.
    Keep,
    /// An object: only these members (each with its own shape).
    Object(Vec<(&'static str, Shape)>),
    /// A list: every element, each with this shape.
    Items(Box<Shape>),
}

use Shape::{Items, Keep, Object};

impl Shape {
    /// The shape that keeps every path of `reads`.
    fn of<'r>(reads: impl IntoIterator<Item = &'r [Read]>) -> Shape {
        let mut root = Object(Vec::new());
        for read in reads.into_iter().flatten() {
            let (path, keys, each) = match *read {
                Read::Whole(path) => {
                    root.keep(path);
                    continue;
                }
                Read::Members(path, keys) => (path, keys, false),
                Read::Each(path, keys) => (path, keys, true),
            };
            let Some(mut node) = root.at(path) else {
                continue;
            };
            if each {
                if matches!(node, Object(m) if m.is_empty()) {
                    *node = Items(Box::new(Object(Vec::new())));
                }
                node = match node {
                    Items(item) => item,
                    _ => panic!("{path:?}: each element of a list, and an object"),
                };
            }
            for key in keys {
                node.keep(std::slice::from_ref(key));
            }
        }
        root
    }

    /// Keeps the value at `path` whole.
    fn keep(&mut self, path: Path) {
        if let Some(node) = self.at(path) {
            *node = Keep;
        }
    }

    /// The node at `path`, added member by member (None under a node kept
    /// whole).
    fn at(&mut self, path: &[&'static str]) -> Option<&mut Shape> {
        let mut node = self;
        for key in path {
            let members = match node {
                Keep => return None,
                Object(members) => members,
                Items(_) => panic!("{path:?}: through a list"),
            };
            let i = match members.iter().position(|(name, _)| name == key) {
                Some(i) => i,
                None => {
                    members.push((key, Object(Vec::new())));
                    members.len() - 1
                }
            };
            node = &mut members[i].1;
        }
        Some(node)
    }
}

/// The shape of the view: what the engine reads of any object.
fn object() -> &'static Shape {
    static SHAPE: OnceLock<Shape> = OnceLock::new();
    SHAPE.get_or_init(|| Shape::of(engine_reads().chain(restore::READS.iter().copied())))
}

/// What [`records`] reads: what [`restore::carries_records`] looks at.
fn records_only() -> &'static Shape {
    static SHAPE: OnceLock<Shape> = OnceLock::new();
    SHAPE.get_or_init(|| Shape::of([restore::RECORDS_READS]))
}

/// Parses the engine's view of the object in `json` (see the module doc).
pub fn parse(json: &str) -> serde_json::Result<Value> {
    let mut de = serde_json::Deserializer::from_str(json);
    let value = Seed.deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// Whether the object in `json` carries the engine's records
/// ([`restore::carries_records`]), read from the text without building the
/// object: only the record annotations are kept. False when the text cannot
/// be read.
pub fn records(json: &str) -> bool {
    let mut de = serde_json::Deserializer::from_str(json);
    ShapeSeed(records_only())
        .deserialize(&mut de)
        .is_ok_and(|v| restore::carries_records(&v))
}

/// Reads the engine's view of an object from any deserializer (for a
/// parse that builds it in passing, as the review path does).
pub struct Seed;

impl<'de> DeserializeSeed<'de> for Seed {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        ShapeSeed(object()).deserialize(deserializer)
    }
}

struct ShapeSeed(&'static Shape);

impl<'de> DeserializeSeed<'de> for ShapeSeed {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Value, D::Error> {
        match self.0 {
            Keep => serde::Deserialize::deserialize(deserializer),
            shape => deserializer.deserialize_any(ShapeVisitor(shape)),
        }
    }
}

/// Builds a `Value` exactly as `Value`'s own visitor does, except for the
/// members and elements its shape prunes.
struct ShapeVisitor(&'static Shape);

impl<'de> Visitor<'de> for ShapeVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any valid JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        ShapeSeed(self.0).deserialize(d)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64));
        match self.0 {
            Items(item) => {
                while let Some(v) = seq.next_element_seed(ShapeSeed(item))? {
                    items.push(v);
                }
            }
            // Not the list the shape expects: kept whole.
            _ => {
                while let Some(v) = seq.next_element::<Value>()? {
                    items.push(v);
                }
            }
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        let Object(members) = self.0 else {
            // Not the object the shape expects: kept whole.
            while let Some((k, v)) = map.next_entry::<String, Value>()? {
                out.insert(k, v);
            }
            return Ok(Value::Object(out));
        };
        let mut placeholder = false;
        while let Some(Text(key)) = map.next_key()? {
            match members.iter().find(|(name, _)| *name == key) {
                Some((_, shape)) => {
                    let v = map.next_value_seed(ShapeSeed(shape))?;
                    out.insert(key.into_owned(), v);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                    // The first member left out stays, as null: a map is
                    // empty in the view only when it is in the object, so
                    // the engine never removes a parent it emptied of what
                    // it sees (a pod template's `metadata` still holding
                    // the labels, annotations still holding others).
                    if !placeholder {
                        placeholder = true;
                        out.insert(key.into_owned(), Value::Null);
                    }
                }
            }
        }
        Ok(Value::Object(out))
    }
}

/// A JSON string borrowed from the input when it has no escapes (map keys
/// here; the review path reads the request's strings with it too).
#[derive(Debug, Default)]
pub struct Text<'a>(pub Cow<'a, str>);

impl<'de: 'a, 'a> serde::Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                // The words of `String`'s own visitor: messages do not change.
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V(std::marker::PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keeps_what_the_engine_reads_and_a_null_for_the_first_member_left_out() {
        let object = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "c", "labels": {"a": "b"}, "annotations": {"x": "y"}},
            "spec": {"replicas": 1, "template": {"spec": {
                "containers": [{"name": "c", "image": "i", "args": ["-v"]}, {"name": "d"}],
                "volumes": [{"name": "v"}]}}},
            "status": {"replicas": 1}
        });
        let view = parse(&object.to_string()).unwrap();
        assert_eq!(
            view,
            json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "c", "labels": {"a": null}, "annotations": {"x": null}},
                "spec": {"replicas": 1, "template": {"spec": {
                    "containers": [{"name": "c", "image": null, "args": ["-v"]}, {"name": "d"}],
                    "volumes": null}}},
                "status": null
            })
        );
    }

    #[test]
    fn a_node_of_another_type_is_kept_whole_and_duplicates_keep_the_last() {
        let text = r#"{"spec": [1, {"a": 2}], "metadata": {"name": "a", "name": 5},
                       "data": "text", "status": {"deep": [1e3]}}"#;
        let view = parse(text).unwrap();
        assert_eq!(
            view,
            json!({"spec": [1, {"a": 2}], "metadata": {"name": 5}, "data": "text", "status": null})
        );
        assert_eq!(parse("[1, 2]").unwrap(), json!([1, 2]));
        assert_eq!(parse("\"x\"").unwrap(), json!("x"));
        assert!(parse("{\"a\": 1} x").is_err());
    }

    #[test]
    fn escaped_keys_are_matched() {
        let view = parse(r#"{"sp\u0065c": {"replicas": 2}}"#).unwrap();
        assert_eq!(view, json!({"spec": {"replicas": 2}}));
    }
}
