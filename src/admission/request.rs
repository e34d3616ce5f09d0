//! The AdmissionReview request as the review path reads it: one pass over
//! the bytes, strings borrowed from them (copied only when they hold
//! escapes), and `request.object` kept as raw JSON text (`RawValue`): it is
//! scanned once and built only where a policy governs the request
//! ([`crate::engine::view`]), or probed for its `metadata` when the
//! request itself names no namespace or name.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::engine::view::{self, Text};
use crate::telemetry::clip;

/// Longest `request.uid` accepted (the API server sends a UUID).
pub const MAX_UID_BYTES: usize = 256;

/// Longest piece of request content echoed in an answer or a log line.
pub const ECHO_BYTES: usize = 256;

/// `request`: what the review path reads of it.
pub(crate) struct RequestIn<'a> {
    pub uid: Text<'a>,
    pub kind: Option<GvkIn<'a>>,
    pub operation: Text<'a>,
    pub namespace: Option<Text<'a>>,
    pub name: Option<Text<'a>>,
    pub object: Option<ObjectIn<'a>>,
}

/// `request.object`, read as the parse found it when it got there.
pub(crate) enum ObjectIn<'a> {
    /// The engine's view ([`crate::engine::view`]), built in the same pass:
    /// the operation and namespace came first (the API server sends them
    /// first) and [`Wants`] asked for it.
    View(Value),
    /// The text, scanned (validated) but not built: not wanted, or the
    /// parse could not tell yet.
    Raw(&'a RawValue),
}

/// Whether the review wants the engine's view of the object of a request
/// with this operation and namespace (a governed CREATE or UPDATE).
pub(crate) type Wants<'w> = &'w dyn Fn(&str, &str) -> bool;

const REQUEST_FIELDS: &[&str] = &["uid", "kind", "operation", "namespace", "name", "object"];

/// Reads `request` in one pass, deciding at `object` how to read it.
struct RequestSeed<'w>(Wants<'w>);

impl<'de> DeserializeSeed<'de> for RequestSeed<'_> {
    type Value = RequestIn<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<RequestIn<'de>, D::Error> {
        d.deserialize_struct("RequestIn", REQUEST_FIELDS, self)
    }
}

/// One member of `request`, refusing a second copy as serde's derive does.
fn once<'de, A: MapAccess<'de>, T>(
    slot: &mut Option<T>,
    name: &'static str,
    value: impl FnOnce(&mut A) -> Result<T, A::Error>,
    map: &mut A,
) -> Result<(), A::Error> {
    if slot.is_some() {
        return Err(serde::de::Error::duplicate_field(name));
    }
    *slot = Some(value(map)?);
    Ok(())
}

impl<'de> Visitor<'de> for RequestSeed<'_> {
    type Value = RequestIn<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("struct RequestIn")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RequestIn<'de>, A::Error> {
        let (mut uid, mut kind, mut operation) = (None, None, None);
        let (mut namespace, mut name, mut object) = (None, None, None);
        while let Some(key) = map.next_key::<Text<'de>>()? {
            match key.0.as_ref() {
                "uid" => once(&mut uid, "uid", |m| m.next_value(), &mut map)?,
                "kind" => once(&mut kind, "kind", |m| m.next_value(), &mut map)?,
                "operation" => once(&mut operation, "operation", |m| m.next_value(), &mut map)?,
                "namespace" => once(&mut namespace, "namespace", |m| m.next_value(), &mut map)?,
                "name" => once(&mut name, "name", |m| m.next_value(), &mut map)?,
                "object" => {
                    let wanted = match (&operation, &namespace) {
                        (Some(Text(op)), Some(Some(Text(ns)))) => (self.0)(op, ns),
                        _ => false,
                    };
                    let read = |m: &mut A| match wanted {
                        true => m
                            .next_value_seed(view::Seed)
                            .map(|v| Some(ObjectIn::View(v))),
                        false => m
                            .next_value::<Option<&'de RawValue>>()
                            .map(|r| r.map(ObjectIn::Raw)),
                    };
                    once(&mut object, "object", read, &mut map)?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(RequestIn {
            uid: uid.ok_or_else(|| serde::de::Error::missing_field("uid"))?,
            kind: kind.flatten(),
            operation: operation.ok_or_else(|| serde::de::Error::missing_field("operation"))?,
            namespace: namespace.flatten(),
            name: name.flatten(),
            object: object.flatten(),
        })
    }
}

#[derive(Deserialize)]
pub(crate) struct GvkIn<'a> {
    #[serde(default, borrow)]
    pub group: Text<'a>,
    #[serde(default, borrow)]
    pub kind: Text<'a>,
}

/// The review as the fast path reads it: `apiVersion`, `kind` and
/// `request` ([`RequestSeed`]).
struct ReviewSeed<'w>(Wants<'w>);

struct ReviewIn<'a> {
    api_version: Option<Text<'a>>,
    kind: Option<Text<'a>>,
    request: Option<RequestIn<'a>>,
}

impl<'de> DeserializeSeed<'de> for ReviewSeed<'_> {
    type Value = ReviewIn<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<ReviewIn<'de>, D::Error> {
        d.deserialize_struct("ReviewIn", &["apiVersion", "kind", "request"], self)
    }
}

impl<'de> Visitor<'de> for ReviewSeed<'_> {
    type Value = ReviewIn<'de>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("struct ReviewIn")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ReviewIn<'de>, A::Error> {
        let (mut api_version, mut kind, mut request) = (None, None, None);
        while let Some(key) = map.next_key::<Text<'de>>()? {
            match key.0.as_ref() {
                "apiVersion" => once(&mut api_version, "apiVersion", |m| m.next_value(), &mut map)?,
                "kind" => once(&mut kind, "kind", |m| m.next_value(), &mut map)?,
                "request" => {
                    let read = |m: &mut A| m.next_value_seed(OptionSeed(RequestSeed(self.0)));
                    once(&mut request, "request", read, &mut map)?;
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(ReviewIn {
            api_version: api_version.flatten(),
            kind: kind.flatten(),
            request: request.flatten(),
        })
    }
}

/// `null` or what the inner seed reads (as `Option<T>` reads `T`).
struct OptionSeed<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for OptionSeed<S> {
    type Value = Option<S::Value>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de, S: DeserializeSeed<'de>> Visitor<'de> for OptionSeed<S> {
    type Value = Option<S::Value>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("option")
    }
    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.0.deserialize(d).map(Some)
    }
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

/// Why a body is not a usable AdmissionReview: the 400 answer's reason
/// (each cause's text is part of it: the API server shows the reason whole).
#[derive(Debug, thiserror::Error)]
pub enum BadReview {
    #[error("body is not JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("not an AdmissionReview: the body is JSON but not an object")]
    NotAnObject,
    #[error("not an AdmissionReview: {0}")]
    NotAReview(serde_json::Error),
    #[error(
        "not an AdmissionReview: apiVersion {api_version:?}, kind {kind:?} (want admission.k8s.io/v1, AdmissionReview)"
    )]
    Kind { api_version: String, kind: String },
    #[error("AdmissionReview has no request")]
    NoRequest,
    #[error("AdmissionReview request: {0}")]
    Request(serde_json::Error),
    #[error("AdmissionReview request.uid is {0} bytes; at most {MAX_UID_BYTES} are accepted")]
    UidTooLong(usize),
    #[error("AdmissionReview request.operation: unknown operation {0:?}")]
    Operation(String),
    #[error("AdmissionReview request.object: {0}")]
    Object(serde_json::Error),
}

/// Parses the body in one pass, building the engine's view of the object
/// in that pass when `wants` asks for it. When that fails, the message comes from
/// that pass's error and a look at the outer shape that allocates nothing
/// for the object, so a bad body never costs a second full parse.
/// Returns why the body is not a usable AdmissionReview.
pub(crate) fn parse_review<'a>(body: &'a [u8], wants: Wants<'_>) -> Result<Parsed<'a>, BadReview> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let fast = ReviewSeed(wants)
        .deserialize(&mut de)
        .and_then(|r| de.end().map(|()| r));
    let (api_version, review_kind, request) = match fast {
        Ok(r) => (
            r.api_version.map(|t| t.0),
            r.kind.map(|t| t.0),
            r.request.map(Ok),
        ),
        Err(fast) => {
            if let Err(e) = serde_json::from_slice::<IgnoredAny>(body) {
                return Err(BadReview::NotJson(e));
            }
            if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
                return Err(BadReview::NotAnObject);
            }
            let shape =
                serde_json::from_slice::<ReviewShape>(body).map_err(BadReview::NotAReview)?;
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
        return Err(BadReview::Kind {
            api_version: clip(&api_version, ECHO_BYTES),
            kind: clip(&kind, ECHO_BYTES),
        });
    }
    match request {
        None => Err(BadReview::NoRequest),
        Some(Err(e)) => Err(BadReview::Request(e)),
        Some(Ok(request)) if request.uid.0.len() > MAX_UID_BYTES => {
            Err(BadReview::UidTooLong(request.uid.0.len()))
        }
        Some(Ok(request)) => Ok(Parsed {
            api_version,
            kind,
            request,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OBJECT: &str = r#"{"kind": "Deployment", "metadata": {"name": "c"}, "status": {"x": 1}}"#;

    fn object_of<'a>(body: &'a str, wants: Wants<'_>) -> Option<ObjectIn<'a>> {
        parse_review(body.as_bytes(), wants)
            .ok()
            .unwrap()
            .request
            .object
    }

    fn review(request: &str) -> String {
        format!(
            r#"{{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {{{request}}}}}"#
        )
    }

    #[test]
    fn the_view_is_built_in_the_pass_only_when_wanted_and_decidable() {
        let governed = |op: &str, ns: &str| op == "CREATE" && ns == "gov";
        let api_order = review(&format!(
            r#""uid": "u", "namespace": "gov", "operation": "CREATE", "object": {OBJECT}"#
        ));
        match object_of(&api_order, &governed) {
            Some(ObjectIn::View(v)) => {
                assert_eq!(
                    v,
                    serde_json::json!({"kind": "Deployment", "metadata": {"name": "c"}, "status": null})
                )
            }
            _ => panic!("API server order: the view is built in the pass"),
        }
        // The object before the operation: not decidable yet, kept as text.
        let object_first = review(&format!(
            r#""uid": "u", "namespace": "gov", "object": {OBJECT}, "operation": "CREATE""#
        ));
        assert!(
            matches!(object_of(&object_first, &governed), Some(ObjectIn::Raw(r)) if r.get() == OBJECT)
        );
        // Not wanted: kept as text.
        let other = api_order.replace("\"gov\"", "\"default\"");
        assert!(matches!(
            object_of(&other, &governed),
            Some(ObjectIn::Raw(_))
        ));
        let null =
            review(r#""uid": "u", "namespace": "gov", "operation": "CREATE", "object": null"#);
        assert!(matches!(
            object_of(&null, &governed),
            Some(ObjectIn::View(Value::Null))
        ));
    }

    #[test]
    fn members_are_checked_as_serde_derive_checks_them() {
        let wants = |_: &str, _: &str| true;
        let err = |request: &str| {
            parse_review(review(request).as_bytes(), &wants)
                .err()
                .unwrap()
                .to_string()
        };
        assert!(err(r#""operation": "CREATE""#).contains("missing field `uid`"));
        assert!(err(r#""uid": "u""#).contains("missing field `operation`"));
        assert!(
            err(r#""uid": "u", "uid": "v", "operation": "CREATE""#)
                .contains("duplicate field `uid`")
        );
        assert!(err(r#""uid": 3, "operation": "CREATE""#).contains("expected a string"));
        let dup_object =
            r#""uid": "u", "operation": "CREATE", "namespace": "n", "object": {}, "object": {}"#;
        assert!(err(dup_object).contains("duplicate field `object`"));
        let body = review(r#""uid": "u", "operation": "DELETE", "kind": null, "extra": [1]"#);
        let ok = parse_review(body.as_bytes(), &wants).ok().unwrap();
        assert!(ok.request.kind.is_none() && ok.request.object.is_none());
    }
}
