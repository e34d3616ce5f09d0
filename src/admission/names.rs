//! The names of an object whose request names none: `metadata.namespace`,
//! `name` and `generateName`, read from the object's text without building
//! it.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
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
    de.deserialize_any(TopV).unwrap_or_default()
}

/// Accepts any JSON value and skips it (`IgnoredAny` for every type).
macro_rules! skip_scalars {
    ($out:ty) => {
        fn visit_bool<E>(self, _: bool) -> Result<$out, E> {
            Ok(Default::default())
        }
        fn visit_i64<E>(self, _: i64) -> Result<$out, E> {
            Ok(Default::default())
        }
        fn visit_u64<E>(self, _: u64) -> Result<$out, E> {
            Ok(Default::default())
        }
        fn visit_f64<E>(self, _: f64) -> Result<$out, E> {
            Ok(Default::default())
        }
        fn visit_str<E>(self, _: &str) -> Result<$out, E> {
            Ok(Default::default())
        }
        fn visit_unit<E>(self) -> Result<$out, E> {
            Ok(Default::default())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<$out, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(Default::default())
        }
    };
}

/// The object: only its `metadata` member is looked at.
struct TopV;

impl<'de> Visitor<'de> for TopV {
    type Value = Names<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    skip_scalars!(Names<'de>);
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Names<'de>, A::Error> {
        let mut names = Names::default();
        while let Some(key) = map.next_key::<Text<'de>>()? {
            if key.0 == "metadata" {
                names = map.next_value_seed(MetaSeed)?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(names)
    }
}

struct MetaSeed;

impl<'de> serde::de::DeserializeSeed<'de> for MetaSeed {
    type Value = Names<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Names<'de>, D::Error> {
        d.deserialize_any(MetaV)
    }
}

struct MetaV;

impl<'de> Visitor<'de> for MetaV {
    type Value = Names<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    skip_scalars!(Names<'de>);
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Names<'de>, A::Error> {
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
            *slot = map.next_value::<MaybeText<'de>>()?.0;
        }
        Ok(names)
    }
}

/// A string (borrowed where it can be), or `None` for any other value.
#[derive(Default)]
struct MaybeText<'a>(Option<Cow<'a, str>>);

impl<'de> Deserialize<'de> for MaybeText<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MaybeText<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<MaybeText<'de>, E> {
                Ok(MaybeText(None))
            }
            fn visit_i64<E>(self, _: i64) -> Result<MaybeText<'de>, E> {
                Ok(MaybeText(None))
            }
            fn visit_u64<E>(self, _: u64) -> Result<MaybeText<'de>, E> {
                Ok(MaybeText(None))
            }
            fn visit_f64<E>(self, _: f64) -> Result<MaybeText<'de>, E> {
                Ok(MaybeText(None))
            }
            fn visit_unit<E>(self) -> Result<MaybeText<'de>, E> {
                Ok(MaybeText(None))
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<MaybeText<'de>, E> {
                Ok(MaybeText(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E>(self, v: &str) -> Result<MaybeText<'de>, E> {
                Ok(MaybeText(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<MaybeText<'de>, A::Error> {
                while seq.next_element::<IgnoredAny>()?.is_some() {}
                Ok(MaybeText(None))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<MaybeText<'de>, A::Error> {
                while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(MaybeText(None))
            }
        }
        d.deserialize_any(V)
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
