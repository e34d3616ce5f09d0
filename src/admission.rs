//! AdmissionReview wire protocol: the pure core of `POST /mutate`.
//!
//! [`review`] turns request bytes and a policy snapshot into a
//! [`ReviewReply`] (HTTP status, JSON body, labels for logs and metrics).
//! It does no I/O and never panics, whatever the bytes.
//!
//! The request is parsed into a small serde model (not
//! `kube::core::admission::AdmissionReview<DynamicObject>`): the engine wants
//! the object as a `serde_json::Value`, and a lenient model lets a review
//! whose object is malformed reach the engine-error path (admitted with a
//! warning) instead of being rejected as a bad request.

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::engine::{Input, Operation};
use crate::store::Snapshot;
use crate::telemetry::clip;

/// The warning attached while the policy sources are still syncing.
pub const NOT_SYNCED_WARNING: &str =
    "knative-ha-webhook: policy not yet synced; object admitted unchanged";

/// Largest accepted request body (an UPDATE carries two objects of up to 3 MiB).
pub const MAX_BODY_BYTES: usize = 7 * 1024 * 1024;

/// What to answer when mutation fails internally.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OnError {
    /// Admit the object unchanged, with a warning (never block the cluster).
    #[default]
    Allow,
    /// Refuse the object.
    Deny,
}

/// Options of [`review`].
#[derive(Clone, Copy, Debug, Default)]
pub struct ReviewOptions {
    pub on_error: OnError,
}

/// How a review ended; the `outcome` label of the request metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Admitted with a non-empty patch.
    Patched,
    /// A policy governs the namespace; nothing to change.
    Unchanged,
    /// No policy for the namespace, or DELETE/CONNECT: admitted as is.
    Skipped,
    /// Policy sources still syncing: admitted as is with a warning.
    NotSynced,
    /// Engine failed; admitted as is with a warning (`--on-error allow`).
    ErrorAllowed,
    /// Engine failed; refused (`--on-error deny`).
    ErrorDenied,
    /// The body was not a usable AdmissionReview (HTTP 400).
    BadRequest,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Patched => "patched",
            Outcome::Unchanged => "unchanged",
            Outcome::Skipped => "skipped",
            Outcome::NotSynced => "not_synced",
            Outcome::ErrorAllowed => "error_allowed",
            Outcome::ErrorDenied => "error_denied",
            Outcome::BadRequest => "bad_request",
        }
    }
}

/// The answer to one review.
#[derive(Clone, Debug)]
pub struct ReviewReply {
    /// HTTP status: 200 for every parsed review, 400 for bad input.
    pub status: u16,
    /// JSON body (an AdmissionReview, or an error object for 400).
    pub body: Value,
    pub outcome: Outcome,
    /// Bounded label: `Deployment`, `ConfigMap`, `HorizontalPodAutoscaler`,
    /// `PodDisruptionBudget` or `other`.
    pub kind: &'static str,
    /// Bounded label: `CREATE`, `UPDATE`, `DELETE`, `CONNECT` or `other`.
    pub operation: &'static str,
    pub uid: String,
    pub namespace: String,
    pub name: String,
    pub patch_ops: usize,
    /// The engine error or the bad-request reason, for the log line.
    pub error: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RequestIn {
    uid: String,
    kind: Option<GvkIn>,
    operation: String,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    object: Option<Value>,
}

#[derive(Deserialize)]
struct GvkIn {
    #[serde(default)]
    kind: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewOut<'a> {
    api_version: &'a str,
    kind: &'a str,
    response: ResponseOut,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ResponseOut {
    uid: String,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    patch: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<StatusOut>,
}

#[derive(Serialize)]
struct StatusOut {
    status: &'static str,
    code: u16,
    message: String,
}

/// A JSON error body for non-review answers (400, 404, 405, 413).
pub fn error_body(code: u16, reason: &str, message: &str) -> Value {
    serde_json::json!({ "code": code, "reason": reason, "message": message })
}

fn bad_request(message: String) -> ReviewReply {
    // serde's messages quote the offending content: never echo it whole.
    let message = clip(&message, 4 * ECHO_BYTES);
    ReviewReply {
        status: 400,
        body: error_body(400, "BadRequest", &message),
        outcome: Outcome::BadRequest,
        kind: "other",
        operation: "other",
        uid: String::new(),
        namespace: String::new(),
        name: String::new(),
        patch_ops: 0,
        error: Some(message),
    }
}

fn kind_label(kind: &str) -> &'static str {
    match kind {
        "Deployment" => "Deployment",
        "ConfigMap" => "ConfigMap",
        "HorizontalPodAutoscaler" => "HorizontalPodAutoscaler",
        "PodDisruptionBudget" => "PodDisruptionBudget",
        _ => "other",
    }
}

fn parse_operation(op: &str) -> Option<(Operation, &'static str)> {
    match op {
        "CREATE" => Some((Operation::Create, "CREATE")),
        "UPDATE" => Some((Operation::Update, "UPDATE")),
        "DELETE" => Some((Operation::Delete, "DELETE")),
        "CONNECT" => Some((Operation::Connect, "CONNECT")),
        _ => None,
    }
}

fn metadata_str<'a>(object: Option<&'a Value>, field: &str) -> Option<&'a str> {
    object?.get("metadata")?.get(field)?.as_str()
}

/// The review as the fast path reads it: one pass from the bytes, the
/// request (and its object) deserialised in place.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewFast {
    api_version: Option<String>,
    kind: Option<String>,
    request: Option<RequestIn>,
}

/// The review's outer shape, for the message when the one-pass parse
/// failed: nothing below `request` is kept (no second copy of the object).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewShape {
    api_version: Option<String>,
    kind: Option<String>,
    #[allow(dead_code)]
    request: Option<serde::de::IgnoredAny>,
}

/// Longest `request.uid` accepted (the API server sends a UUID).
pub const MAX_UID_BYTES: usize = 256;

/// Longest piece of request content echoed in an answer or a log line.
pub const ECHO_BYTES: usize = 256;

/// Parses the body in one pass. When that fails, the message comes from
/// that pass's error and a look at the outer shape that allocates nothing
/// for the object, so a bad body never costs a second full parse.
/// Returns the review's apiVersion, kind (mirrored in the answer) and
/// request, or why the body is not a usable AdmissionReview.
fn parse_review(body: &[u8]) -> Result<(String, String, RequestIn), String> {
    let (api_version, review_kind, request) = match serde_json::from_slice::<ReviewFast>(body) {
        Ok(r) => (r.api_version, r.kind, r.request.map(Ok)),
        Err(fast) => {
            if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(body) {
                return Err(format!("body is not JSON: {e}"));
            }
            if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
                return Err(
                    "not an AdmissionReview: the body is JSON but not an object".to_string()
                );
            }
            let shape = serde_json::from_slice::<ReviewShape>(body)
                .map_err(|e| format!("not an AdmissionReview: {e}"))?;
            (shape.api_version, shape.kind, Some(Err(fast)))
        }
    };
    let api_version = api_version.unwrap_or_default();
    let review_kind = review_kind.unwrap_or_default();
    if review_kind != "AdmissionReview" || !api_version.starts_with("admission.k8s.io/") {
        return Err(format!(
            "not an AdmissionReview: apiVersion {:?}, kind {:?} \
             (want admission.k8s.io/v1, AdmissionReview)",
            clip(&api_version, ECHO_BYTES),
            clip(&review_kind, ECHO_BYTES),
        ));
    }
    match request {
        None => Err("AdmissionReview has no request".to_string()),
        Some(Err(e)) => Err(format!("AdmissionReview request: {e}")),
        Some(Ok(request)) if request.uid.len() > MAX_UID_BYTES => Err(format!(
            "AdmissionReview request.uid is {} bytes; at most {MAX_UID_BYTES} are accepted",
            request.uid.len()
        )),
        Some(Ok(request)) => Ok((api_version, review_kind, request)),
    }
}

/// Answers one AdmissionReview given as raw bytes.
pub fn review(snapshot: &Snapshot, body: &[u8], opts: &ReviewOptions) -> ReviewReply {
    let (api_version, review_kind, request) = match parse_review(body) {
        Ok(parsed) => parsed,
        Err(message) => return bad_request(message),
    };
    let Some((operation, op_label)) = parse_operation(&request.operation) else {
        return bad_request(format!(
            "AdmissionReview request.operation: unknown operation {:?}",
            clip(&request.operation, ECHO_BYTES)
        ));
    };
    let kind = request.kind.as_ref().map(|k| k.kind.as_str()).unwrap_or("");
    let object = request.object.as_ref();
    let namespace = request
        .namespace
        .clone()
        .filter(|ns| !ns.is_empty())
        .or_else(|| metadata_str(object, "namespace").map(str::to_string))
        .unwrap_or_default();
    let name = request
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| metadata_str(object, "name").map(str::to_string))
        .or_else(|| metadata_str(object, "generateName").map(|g| format!("{g}*")))
        .unwrap_or_default();

    let mut reply = ReviewReply {
        status: 200,
        body: Value::Null,
        outcome: Outcome::Skipped,
        kind: kind_label(kind),
        operation: op_label,
        uid: request.uid.clone(),
        namespace,
        name,
        patch_ops: 0,
        error: None,
    };
    let mut response = ResponseOut {
        uid: request.uid,
        allowed: true,
        patch_type: None,
        patch: None,
        warnings: Vec::new(),
        status: None,
    };

    if matches!(operation, Operation::Create | Operation::Update) {
        if !snapshot.synced {
            reply.outcome = Outcome::NotSynced;
            response.warnings.push(NOT_SYNCED_WARNING.to_string());
        } else if snapshot.policy_for(&reply.namespace).is_some() {
            let null = Value::Null;
            let input = Input {
                operation,
                namespace: &reply.namespace,
                object: object.unwrap_or(&null),
            };
            match snapshot.mutate(&input) {
                Ok(None) => {}
                Ok(Some(mutation)) if mutation.is_empty() => {
                    reply.outcome = Outcome::Unchanged;
                    response.warnings = mutation.changes;
                }
                Ok(Some(mutation)) => match serde_json::to_vec(&mutation.patch) {
                    Ok(bytes) => {
                        reply.outcome = Outcome::Patched;
                        reply.patch_ops = mutation.patch.0.len();
                        response.patch_type = Some("JSONPatch");
                        response.patch =
                            Some(base64::engine::general_purpose::STANDARD.encode(bytes));
                        response.warnings = mutation.changes;
                    }
                    Err(e) => engine_failed(
                        &mut reply,
                        &mut response,
                        format!("serialising the patch: {e}"),
                        opts,
                    ),
                },
                Err(e) => engine_failed(&mut reply, &mut response, e.to_string(), opts),
            }
        }
    }

    let out = ReviewOut {
        api_version: &api_version,
        kind: &review_kind,
        response,
    };
    reply.body = serde_json::to_value(&out).unwrap_or_else(|e| {
        error_body(
            500,
            "InternalError",
            &format!("serialising the response: {e}"),
        )
    });
    reply
}

fn engine_failed(
    reply: &mut ReviewReply,
    response: &mut ResponseOut,
    message: String,
    opts: &ReviewOptions,
) {
    let what = format!("{} {}/{}", reply.kind, reply.namespace, reply.name);
    match opts.on_error {
        OnError::Allow => {
            reply.outcome = Outcome::ErrorAllowed;
            response.warnings.push(format!(
                "knative-ha-webhook: could not compute the HA patch for {what}: {message}; \
                 object admitted unchanged"
            ));
        }
        OnError::Deny => {
            reply.outcome = Outcome::ErrorDenied;
            response.allowed = false;
            response.warnings.push(format!(
                "knative-ha-webhook: could not compute the HA patch for {what}: {message}"
            ));
            response.status = Some(StatusOut {
                status: "Failure",
                code: 500,
                message: format!(
                    "knative-ha-webhook refused {what}: could not compute the HA patch: {message}"
                ),
            });
        }
    }
    reply.error = Some(message);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;

    fn snapshot() -> Snapshot {
        let policy = Policy::from_yaml(include_str!("../examples/policy.yaml")).unwrap();
        Snapshot::from_policies([policy])
    }

    fn review_json(op: &str, ns: &str, object: Value) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u-1",
                "kind": {"group": "apps", "version": "v1", "kind": "Deployment"},
                "operation": op,
                "namespace": ns,
                "name": "controller",
                "object": object,
            }
        }))
        .unwrap()
    }

    #[test]
    fn bad_inputs_are_400_with_a_reason() {
        let cases: &[(&str, &[u8], &str)] = &[
            ("not json", b"{nope", "not JSON"),
            ("json array", b"[1,2]", "not an object"),
            ("json string", b"\"x\"", "not an object"),
            ("wrong kind", br#"{"apiVersion":"v1","kind":"Pod"}"#, "not an AdmissionReview"),
            (
                "no request",
                br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
                "no request",
            ),
            (
                "request without uid",
                br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"operation":"CREATE"}}"#,
                "uid",
            ),
            (
                "unknown operation",
                br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"x","operation":"PATCH"}}"#,
                "unknown operation",
            ),
        ];
        for (name, body, want) in cases {
            let reply = review(&snapshot(), body, &ReviewOptions::default());
            assert_eq!(reply.status, 400, "{name}");
            assert_eq!(reply.outcome, Outcome::BadRequest, "{name}");
            let msg = reply.body["message"].as_str().unwrap();
            assert!(msg.contains(want), "{name}: {msg}");
        }
    }

    #[test]
    fn unsynced_snapshot_admits_with_warning() {
        let mut snap = snapshot();
        snap.synced = false;
        let reply = review(
            &snap,
            &review_json("CREATE", "knative-serving", serde_json::json!({})),
            &ReviewOptions::default(),
        );
        assert_eq!(reply.outcome, Outcome::NotSynced);
        assert_eq!(reply.body["response"]["warnings"][0], NOT_SYNCED_WARNING);
        assert_eq!(reply.body["response"]["allowed"], true);
        assert!(reply.body["response"].get("patch").is_none());
    }

    #[test]
    fn engine_error_allow_and_deny() {
        let body = review_json("CREATE", "knative-serving", serde_json::json!([1, 2]));
        let allow = review(&snapshot(), &body, &ReviewOptions::default());
        assert_eq!(allow.outcome, Outcome::ErrorAllowed);
        assert_eq!(allow.body["response"]["allowed"], true);
        assert_eq!(
            allow.body["response"]["warnings"].as_array().unwrap().len(),
            1
        );
        let deny = review(
            &snapshot(),
            &body,
            &ReviewOptions {
                on_error: OnError::Deny,
            },
        );
        assert_eq!(deny.outcome, Outcome::ErrorDenied);
        assert_eq!(deny.body["response"]["allowed"], false);
        assert_eq!(deny.body["response"]["status"]["code"], 500);
        assert!(deny.error.is_some());
    }

    #[test]
    fn namespace_falls_back_to_object_metadata() {
        let body = serde_json::to_vec(&serde_json::json!({
            "apiVersion": "admission.k8s.io/v1beta1",
            "kind": "AdmissionReview",
            "request": {"uid": "u", "operation": "CREATE",
                        "kind": {"kind": "Deployment"},
                        "object": {"metadata": {"name": "x", "namespace": "knative-serving"}}}
        }))
        .unwrap();
        let reply = review(&snapshot(), &body, &ReviewOptions::default());
        assert_eq!(reply.namespace, "knative-serving");
        assert_eq!(reply.body["apiVersion"], "admission.k8s.io/v1beta1");
        assert_ne!(reply.outcome, Outcome::Skipped);
    }

    fn arb_json() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(Value::from),
            "[a-z/.-]{0,12}".prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
                proptest::collection::btree_map(
                    prop_oneof![
                        Just("metadata".to_string()),
                        Just("spec".to_string()),
                        Just("replicas".to_string()),
                        Just("template".to_string()),
                        Just("data".to_string()),
                        Just("namespace".to_string()),
                        Just("name".to_string()),
                        Just("kind".to_string()),
                        "[a-z]{1,6}",
                    ],
                    inner,
                    0..6,
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// Arbitrary JSON objects of every kind, in the governed namespace:
        /// always a well-formed 200 answer, never a panic.
        #[test]
        fn never_panics_on_any_object(
            object in arb_json(),
            kind in proptest::sample::select(vec![
                "Deployment", "ConfigMap", "HorizontalPodAutoscaler", "PodDisruptionBudget", "Pod",
            ]),
            op in proptest::sample::select(vec!["CREATE", "UPDATE", "DELETE"]),
        ) {
            let body = serde_json::to_vec(&serde_json::json!({
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {"uid": "u", "operation": op, "namespace": "knative-serving",
                            "kind": {"group": "", "version": "v1", "kind": kind},
                            "object": object}
            })).unwrap();
            let reply = review(&snapshot(), &body, &ReviewOptions::default());
            proptest::prop_assert_eq!(reply.status, 200);
            proptest::prop_assert_eq!(&reply.body["response"]["uid"], "u");
            if let Some(patch) = reply.body["response"]["patch"].as_str() {
                // A patch, when there is one, applies to the object it was made for.
                let bytes = base64::engine::general_purpose::STANDARD.decode(patch).unwrap();
                let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
                let mut patched = object.clone();
                proptest::prop_assert!(json_patch::patch(&mut patched, &patch).is_ok());
            }
        }

        #[test]
        fn never_panics_on_any_bytes(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let reply = review(&snapshot(), &bytes, &ReviewOptions::default());
            proptest::prop_assert!(reply.status == 200 || reply.status == 400);
        }
    }
}
