//! The AdmissionReview request as the review path reads it: serde derives
//! over the bytes, strings borrowed from them (copied only when they hold
//! escapes), and `request.object` kept as raw JSON text (`RawValue`).

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
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
        struct V<'a>(PhantomData<&'a ()>);
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
        d.deserialize_str(V(PhantomData))
    }
}

/// `T` read from a JSON object only: serde's derive also reads a struct
/// from a list of its members in order, which no AdmissionReview is.
struct Obj<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Obj<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                // The words of the derive's visitor for these structs.
                let name = std::any::type_name::<T>().rsplit("::").next();
                write!(f, "struct {}", name.unwrap_or_default())
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Obj<T>, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map)).map(Obj)
            }
        }
        d.deserialize_map(V(PhantomData))
    }
}

/// `request`: what the review path reads of it.
#[derive(Deserialize)]
pub(crate) struct RequestIn<'a> {
    #[serde(borrow)]
    pub uid: Text<'a>,
    #[serde(borrow)]
    pub kind: Option<GvkIn<'a>>,
    #[serde(borrow)]
    pub operation: Text<'a>,
    #[serde(borrow)]
    pub namespace: Option<Text<'a>>,
    #[serde(borrow)]
    pub name: Option<Text<'a>>,
    #[serde(borrow)]
    pub object: Option<&'a RawValue>,
}

#[derive(Deserialize)]
pub(crate) struct GvkIn<'a> {
    #[serde(default, borrow)]
    pub group: Text<'a>,
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
    request: Option<Obj<RequestIn<'a>>>,
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

/// Parses the body in one pass. When that fails, the message comes from
/// that pass's error and a look at the outer shape that allocates nothing
/// for the object, so a bad body never costs a second full parse.
/// Returns why the body is not a usable AdmissionReview.
pub(crate) fn parse_review(body: &[u8]) -> Result<Parsed<'_>, BadReview> {
    let (api_version, review_kind, request) = match serde_json::from_slice::<Obj<ReviewIn>>(body) {
        Ok(Obj(r)) => (
            r.api_version.map(|t| t.0),
            r.kind.map(|t| t.0),
            r.request.map(|Obj(r)| Ok(r)),
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

    fn review(request: &str) -> String {
        format!(
            r#"{{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {{{request}}}}}"#
        )
    }

    #[test]
    fn members_are_checked_as_serde_derive_checks_them() {
        let err = |request: &str| {
            parse_review(review(request).as_bytes())
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
        // The derive would read a struct from a list of its members too.
        let listed = r#"{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": ["u", null, "CREATE"]}"#;
        let message = parse_review(listed.as_bytes()).err().unwrap().to_string();
        assert!(
            message.contains("invalid type: sequence, expected struct RequestIn"),
            "{message}"
        );
        let top =
            r#"["admission.k8s.io/v1", "AdmissionReview", {"uid": "u", "operation": "CREATE"}]"#;
        assert!(matches!(
            parse_review(top.as_bytes()),
            Err(BadReview::NotAnObject)
        ));
        let body = review(r#""uid": "u", "operation": "DELETE", "kind": null, "extra": [1]"#);
        let ok = parse_review(body.as_bytes()).ok().unwrap();
        assert!(ok.request.kind.is_none() && ok.request.object.is_none());
    }
}
