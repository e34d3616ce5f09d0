//! The names of an object whose request names none: `metadata.namespace`,
//! `name` and `generateName`, read from the object's text without building
//! it.

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use super::request::Text;

/// The string members of an object's `metadata` the review path names the
/// object by (each `None` unless a string, the last of duplicates winning,
/// as a `serde_json::Value` lookup would see them).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Names<'a> {
    pub namespace: Option<Cow<'a, str>>,
    pub name: Option<Cow<'a, str>>,
    pub generate_name: Option<Cow<'a, str>>,
}

/// Reads [`Names`] from the object without building it.
pub(crate) fn object_names(object: &RawValue) -> Names<'_> {
    let mut de = serde_json::Deserializer::from_str(object.get());
    de.deserialize_any(Look(Top)).unwrap_or_default()
}

/// What a look at one JSON value keeps of a string or of an object; any
/// other value is skipped (as `IgnoredAny` skips it) and reads as nothing.
trait Part<'de>: Sized {
    type Out: Default;
    fn string(self, _: Cow<'de, str>) -> Self::Out {
        Self::Out::default()
    }
    fn object<A: MapAccess<'de>>(self, map: A) -> Result<Self::Out, A::Error>;
}

/// Reads one JSON value, whatever its type, as its [`Part`] says.
struct Look<P>(P);

impl<'de, P: Part<'de>> Visitor<'de> for Look<P> {
    type Value = P::Out;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<P::Out, E> {
        Ok(P::Out::default())
    }
    fn visit_i64<E>(self, _: i64) -> Result<P::Out, E> {
        Ok(P::Out::default())
    }
    fn visit_u64<E>(self, _: u64) -> Result<P::Out, E> {
        Ok(P::Out::default())
    }
    fn visit_f64<E>(self, _: f64) -> Result<P::Out, E> {
        Ok(P::Out::default())
    }
    fn visit_unit<E>(self) -> Result<P::Out, E> {
        Ok(P::Out::default())
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<P::Out, E> {
        Ok(self.0.string(Cow::Borrowed(v)))
    }
    fn visit_str<E>(self, v: &str) -> Result<P::Out, E> {
        Ok(self.0.string(Cow::Owned(v.to_string())))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<P::Out, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(P::Out::default())
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<P::Out, A::Error> {
        self.0.object(map)
    }
}

impl<'de, P: Part<'de>> DeserializeSeed<'de> for Look<P> {
    type Value = P::Out;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<P::Out, D::Error> {
        d.deserialize_any(self)
    }
}

/// The object: only its `metadata` member is looked at.
struct Top;

impl<'de> Part<'de> for Top {
    type Out = Names<'de>;
    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<Names<'de>, A::Error> {
        let mut names = Names::default();
        while let Some(key) = map.next_key::<Text<'de>>()? {
            if key.0 == "metadata" {
                names = map.next_value_seed(Look(Meta))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(names)
    }
}

struct Meta;

impl<'de> Part<'de> for Meta {
    type Out = Names<'de>;
    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<Names<'de>, A::Error> {
        let mut names = Names::default();
        while let Some(key) = map.next_key::<Text<'de>>()? {
            let slot = match key.0.as_ref() {
                "namespace" => &mut names.namespace,
                "name" => &mut names.name,
                "generateName" => &mut names.generate_name,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                    continue;
                }
            };
            *slot = map.next_value_seed(Look(Str))?;
        }
        Ok(names)
    }
}

/// A string (borrowed where it can be), or `None` for any other value.
struct Str;

impl<'de> Part<'de> for Str {
    type Out = Option<Cow<'de, str>>;
    fn string(self, v: Cow<'de, str>) -> Self::Out {
        Some(v)
    }
    fn object<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Out, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(json: &str) -> Names<'_> {
        let raw: &RawValue = serde_json::from_str(json).unwrap();
        object_names(raw)
    }

    #[test]
    fn names_are_read_as_a_value_lookup_would() {
        let n = names(
            r#"{"spec": {"metadata": {"name": "no"}}, "metadata": {"name": "a", "namespace": 3,
                "generateName": "g-", "labels": {"name": "x"}}}"#,
        );
        assert_eq!(n.name.as_deref(), Some("a"));
        assert_eq!(n.namespace, None);
        assert_eq!(n.generate_name.as_deref(), Some("g-"));
        let last = names(r#"{"metadata": {"name": "a", "name": "b\u0041"}}"#);
        assert_eq!(last.name.as_deref(), Some("bA"));
        let retyped = names(r#"{"metadata": {"name": "a", "name": [1]}}"#);
        assert_eq!(retyped.name, None);
        assert_eq!(names("[1, {\"metadata\": {}}]"), Names::default());
        assert_eq!(names(r#"{"metadata": "x"}"#), Names::default());
    }
}
