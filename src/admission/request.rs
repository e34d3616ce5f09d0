//! The AdmissionReview request as the review path reads it: one pass over
//! the bytes, strings borrowed from them (copied only when they hold
//! escapes), and `request.object` kept as raw JSON text (`RawValue`): it is
//! scanned once and built only where a policy governs the request
//! ([`crate::engine::view`]), or probed for its `metadata` when the
//! request itself names no namespace or name.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;

use crate::telemetry::clip;

/// Longest `request.uid` accepted (the API server sends a UUID).
pub const MAX_UID_BYTES: usize = 256;

/// Longest piece of request content echoed in an answer or a log line.
pub const ECHO_BYTES: usize = 256;

/// A JSON string borrowed from the body when it has no escapes.
#[derive(Debug, Default)]
pub(crate) struct Text<'a>(pub Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
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

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RequestIn<'a> {
    #[serde(borrow)]
    pub uid: Text<'a>,
    #[serde(borrow)]
    pub kind: Option<GvkIn<'a>>,
    #[serde(borrow)]
    pub operation: Text<'a>,
    #[serde(default, borrow)]
    pub namespace: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub name: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub object: Option<&'a RawValue>,
}

#[derive(Deserialize)]
pub(crate) struct GvkIn<'a> {
    #[serde(default, borrow)]
    pub kind: Text<'a>,
}

/// The review as the fast path reads it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewIn<'a> {
    #[serde(borrow)]
    api_version: Option<Text<'a>>,
    #[serde(borrow)]
    kind: Option<Text<'a>>,
    #[serde(borrow)]
    request: Option<RequestIn<'a>>,
}

/// The review's outer shape, for the message when the one-pass parse
/// failed: nothing below `request` is kept.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewShape {
    api_version: Option<String>,
    kind: Option<String>,
    #[allow(dead_code)]
    request: Option<IgnoredAny>,
}

/// A parsed review: the apiVersion and kind to mirror, and the request.
pub(crate) struct Parsed<'a> {
    pub api_version: Cow<'a, str>,
    pub kind: Cow<'a, str>,
    pub request: RequestIn<'a>,
}

/// Parses the body in one pass. When that fails, the message comes from
/// that pass's error and a look at the outer shape that allocates nothing
/// for the object, so a bad body never costs a second full parse.
/// Returns why the body is not a usable AdmissionReview.
pub(crate) fn parse_review(body: &[u8]) -> Result<Parsed<'_>, String> {
    let (api_version, review_kind, request) = match serde_json::from_slice::<ReviewIn<'_>>(body) {
        Ok(r) => (
            r.api_version.map(|t| t.0),
            r.kind.map(|t| t.0),
            r.request.map(Ok),
        ),
        Err(fast) => {
            if let Err(e) = serde_json::from_slice::<IgnoredAny>(body) {
                return Err(format!("body is not JSON: {e}"));
            }
            if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
                return Err(
                    "not an AdmissionReview: the body is JSON but not an object".to_string()
                );
            }
            let shape = serde_json::from_slice::<ReviewShape>(body)
                .map_err(|e| format!("not an AdmissionReview: {e}"))?;
            (
                shape.api_version.map(Cow::Owned),
                shape.kind.map(Cow::Owned),
                Some(Err(fast)),
            )
        }
    };
    let api_version = api_version.unwrap_or_default();
    let kind = review_kind.unwrap_or_default();
    if kind != "AdmissionReview" || !api_version.starts_with("admission.k8s.io/") {
        return Err(format!(
            "not an AdmissionReview: apiVersion {:?}, kind {:?} \
             (want admission.k8s.io/v1, AdmissionReview)",
            clip(&api_version, ECHO_BYTES),
            clip(&kind, ECHO_BYTES),
        ));
    }
    match request {
        None => Err("AdmissionReview has no request".to_string()),
        Some(Err(e)) => Err(format!("AdmissionReview request: {e}")),
        Some(Ok(request)) if request.uid.0.len() > MAX_UID_BYTES => Err(format!(
            "AdmissionReview request.uid is {} bytes; at most {MAX_UID_BYTES} are accepted",
            request.uid.0.len()
        )),
        Some(Ok(request)) => Ok(Parsed {
            api_version,
            kind,
            request,
        }),
    }
}

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
