//! AdmissionReview wire protocol: the pure core of `POST /mutate` (and,
//! in [`validate`], of `POST /validate`). [`review`] turns request bytes
//! and a policy snapshot into an [`Answer`]; it does no I/O, never panics
//! whatever the bytes, and knows nothing of HTTP (`server::routes` picks
//! the status codes).
//!
//! The request is read into a small borrowed serde model (`request`, not
//! kube's `AdmissionReview<DynamicObject>`); the object is built (a
//! `serde_json::Value`) only for a CREATE or UPDATE in a governed
//! namespace, or where `--undo-unclaimed` looks at it. A lenient model lets
//! a review whose object is malformed reach the engine-error path
//! (admitted with a warning) instead of being rejected as a bad request.

mod answer;
mod names;
mod request;
mod validate;

use std::borrow::Cow;

use base64::Engine as _;
use serde_json::Value;
use serde_json::value::RawValue;

pub use answer::{Answer, BadRequest, Reviewed};
use answer::{ResponseOut, ReviewOut, StatusOut, bad_request};
pub use request::BadReview;
pub use request::{ECHO_BYTES, MAX_UID_BYTES};
pub use validate::validate;

use crate::engine::{self, Operation, Snapshot};
use crate::telemetry::clip;

/// The warning attached while the policy sources are still syncing.
pub const NOT_SYNCED_WARNING: &str =
    "knative-ha-webhook: policy not yet synced; object admitted unchanged";

/// Largest accepted request body (an UPDATE carries two objects of up to 3 MiB).
pub const MAX_BODY_BYTES: usize = 7 * 1024 * 1024;

/// What to answer when mutation fails internally.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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
    /// `--undo-unclaimed`: where no policy object exists at all
    /// ([`Snapshot::unclaimed`]), undo the engine's records on the objects
    /// sent. Off (the default): such objects are admitted as they are.
    pub undo_unclaimed: bool,
}

/// How a review ended; the `outcome` label of the request metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReviewOutcome {
    /// Admitted with a non-empty patch.
    Patched,
    /// A policy governs the namespace; nothing to change.
    Unchanged,
    /// No policy for the namespace, or DELETE/CONNECT: admitted as is.
    #[default]
    Skipped,
    /// Policy sources still syncing: admitted as is with a warning.
    NotSynced,
    /// Engine failed; admitted as is with a warning (`--on-error allow`).
    ErrorAllowed,
    /// Engine failed; refused (`--on-error deny`).
    ErrorDenied,
    /// The body was not a usable AdmissionReview ([`Answer::BadRequest`]).
    BadRequest,
    /// `POST /validate`: a valid policy object, allowed.
    Accepted,
    /// `POST /validate`: an invalid policy object, refused.
    Refused,
}

impl ReviewOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ReviewOutcome::Patched => "patched",
            ReviewOutcome::Unchanged => "unchanged",
            ReviewOutcome::Skipped => "skipped",
            ReviewOutcome::NotSynced => "not_synced",
            ReviewOutcome::ErrorAllowed => "error_allowed",
            ReviewOutcome::ErrorDenied => "error_denied",
            ReviewOutcome::BadRequest => "bad_request",
            ReviewOutcome::Accepted => "accepted",
            ReviewOutcome::Refused => "refused",
        }
    }
}

fn kind_label(kind: &str) -> &'static str {
    match crate::engine::kinds::named(kind) {
        Some(k) => k.name,
        None if kind == crate::policy::KIND => crate::policy::KIND,
        None => "other",
    }
}

/// How `/mutate` and `/validate` open: the body parsed, its operation
/// known and its answer begun (its names taken from the request, outcome
/// `Skipped`); `Err` is why the body is not a usable AdmissionReview.
fn open(body: &[u8]) -> Result<(request::Parsed<'_>, Operation, Reviewed<'_>), BadReview> {
    let mut parsed = request::parse_review(body)?;
    let request = &mut parsed.request;
    let (operation, label) = match request.operation.0.as_ref() {
        "CREATE" => (Operation::Create, "CREATE"),
        "UPDATE" => (Operation::Update, "UPDATE"),
        "DELETE" => (Operation::Delete, "DELETE"),
        "CONNECT" => (Operation::Connect, "CONNECT"),
        op => return Err(BadReview::Operation(clip(op, ECHO_BYTES))),
    };
    let kind = kind_label(request.kind.as_ref().map_or("", |k| &k.kind.0));
    let namespace = request
        .namespace
        .take()
        .map(|t| t.0)
        .filter(|n| !n.is_empty());
    let name = request.name.take().map(|t| t.0).filter(|n| !n.is_empty());
    // Where the request names none, the object's `metadata` does (read
    // without building the object; `generateName*` for a name yet to come).
    let meta = match (&namespace, &name, request.object) {
        (None, _, Some(object)) | (_, None, Some(object)) => names::object_names(object),
        _ => names::Names::default(),
    };
    let namespace = namespace.or(meta.namespace).unwrap_or_default();
    let name = name.or(meta.name);
    let name = name.or_else(|| meta.generate_name.map(|g| Cow::Owned(format!("{g}*"))));
    let uid = std::mem::take(&mut request.uid.0);
    let reply = Reviewed::skipped(kind, label, uid, namespace, name.unwrap_or_default());
    Ok((parsed, operation, reply))
}

/// Puts the AdmissionReview answer (`response`, for the request's uid,
/// mirroring its `apiVersion` and `kind`) in `reply.body`; returns the
/// warnings it sends.
fn answered(
    parsed: &request::Parsed<'_>,
    reply: &mut Reviewed<'_>,
    response: ResponseOut<'static>,
) -> Vec<String> {
    let out = ReviewOut {
        api_version: &parsed.api_version,
        kind: &parsed.kind,
        response: ResponseOut {
            uid: &reply.uid,
            ..response
        },
    };
    // Plain data (strings, booleans, numbers): serialising it cannot fail.
    reply.body = serde_json::to_vec(&out).unwrap_or_default();
    out.response.warnings
}

/// Answers one AdmissionReview given as raw bytes.
pub fn review<'a>(snapshot: &Snapshot, body: &'a [u8], opts: &ReviewOptions) -> Answer<'a> {
    let (parsed, operation, mut reply) = match open(body) {
        Ok(opened) => opened,
        Err(message) => return bad_request(message),
    };
    let object = parsed.request.object;
    let mut response = ResponseOut::allowed();

    if matches!(operation, Operation::Create | Operation::Update) {
        if !snapshot.synced {
            reply.outcome = ReviewOutcome::NotSynced;
            response.warnings.push(NOT_SYNCED_WARNING.to_string());
        } else if snapshot.policy_for(&reply.namespace).is_some() {
            let object = match parse_object(object) {
                Ok(object) => object,
                Err(message) => return bad_request(message),
            };
            let input = engine::Input {
                operation,
                namespace: &reply.namespace,
                object: &object,
            };
            let mutation = engine::outcome(engine::Answering::Governed(snapshot), &input);
            answer(
                mutation.map(|o| o.mutation),
                &mut reply,
                &mut response,
                opts,
            );
        } else if opts.undo_unclaimed
            && snapshot.unclaimed(&reply.namespace)
            && let Some(raw) = object
        {
            undo_unclaimed(raw, &mut reply, &mut response, opts);
        }
    }

    reply.changes = answered(&parsed, &mut reply, response);
    Answer::Reviewed(reply)
}

/// With `--undo-unclaimed` ([`ReviewOptions::undo_unclaimed`]), where no
/// policy object exists ([`Snapshot::unclaimed`]): an object
/// carrying the engine's records gets them undone
/// ([`engine::restore::undo_unclaimed`]); one without (or whose text
/// does not build into a `Value`) is left alone after a look at its
/// annotations ([`engine::restore::carries_records`]).
fn undo_unclaimed(
    raw: &RawValue,
    reply: &mut Reviewed<'_>,
    response: &mut ResponseOut<'_>,
    opts: &ReviewOptions,
) {
    let Ok(object) = serde_json::from_str::<Value>(raw.get()) else {
        return;
    };
    if !engine::restore::carries_records(&object) {
        return;
    }
    let input = engine::Input::update(&reply.namespace, &object);
    let mutation = engine::outcome(engine::Answering::Unclaimed, &input).map(|o| o.mutation);
    answer(mutation, reply, response, opts);
    if reply.outcome == ReviewOutcome::Unchanged {
        // Records, but nothing to put back: admitted as any object there.
        reply.outcome = ReviewOutcome::Skipped;
    }
}

/// Writes the engine's answer (or its failure) into the review's answer.
fn answer(
    mutation: Result<engine::Mutation, engine::EngineError>,
    reply: &mut Reviewed<'_>,
    response: &mut ResponseOut<'_>,
    opts: &ReviewOptions,
) {
    match mutation {
        Ok(mutation) if mutation.is_empty() => {
            reply.outcome = ReviewOutcome::Unchanged;
            response.warnings = mutation.lines();
        }
        Ok(mutation) => match serde_json::to_vec(&mutation.patch) {
            Ok(bytes) => {
                reply.outcome = ReviewOutcome::Patched;
                reply.patch_ops = mutation.patch.0.len();
                response.patch_type = Some("JSONPatch");
                response.patch = Some(base64::engine::general_purpose::STANDARD.encode(bytes));
                response.warnings = mutation.lines();
            }
            Err(e) => engine_failed(reply, response, format!("serialising the patch: {e}"), opts),
        },
        Err(e) => engine_failed(reply, response, e.to_string(), opts),
    }
}

/// The object of a request, built for the engine (`null` when the request
/// has none); `Err` is a bad request (the text was scanned already: only a
/// number out of range gets here).
fn parse_object(object: Option<&RawValue>) -> Result<Value, BadReview> {
    object.map_or(Ok(Value::Null), |raw| {
        serde_json::from_str(raw.get()).map_err(BadReview::Object)
    })
}

/// The parse alone, as [`review`] does it: the request read, and for a
/// CREATE or UPDATE in a namespace `snapshot` governs, the object built for
/// the engine (returned; otherwise `None`, the object only scanned). (For
/// the `parse` benchmark.)
pub fn parse(snapshot: &Snapshot, body: &[u8]) -> Result<Option<Value>, BadRequest> {
    let bad = |why: BadReview| BadRequest {
        reason: why.to_string(),
    };
    let request = request::parse_review(body).map_err(bad)?.request;
    let namespace = request.namespace.as_ref().map_or("", |n| &n.0);
    let governed = matches!(&*request.operation.0, "CREATE" | "UPDATE")
        && snapshot.synced
        && snapshot.policy_for(namespace).is_some();
    match governed {
        true => parse_object(request.object).map(Some).map_err(bad),
        false => Ok(None),
    }
}

fn engine_failed(
    reply: &mut Reviewed<'_>,
    response: &mut ResponseOut<'_>,
    message: String,
    opts: &ReviewOptions,
) {
    let what = format!("{} {}/{}", reply.kind, reply.namespace, reply.name);
    let warning =
        format!("knative-ha-webhook: could not compute the HA patch for {what}: {message}");
    match opts.on_error {
        OnError::Allow => {
            reply.outcome = ReviewOutcome::ErrorAllowed;
            response
                .warnings
                .push(format!("{warning}; object admitted unchanged"));
        }
        OnError::Deny => {
            reply.outcome = ReviewOutcome::ErrorDenied;
            response.allowed = false;
            response.warnings.push(warning);
            response.status = Some(StatusOut {
                status: "Failure",
                code: 500,
                reason: None,
                message: format!(
                    "knative-ha-webhook refused {what}: could not compute the HA patch: {message}"
                ),
            });
        }
    }
    reply.error = Some(message);
}
