//! The pure core of `POST /validate`: the validating admission review of
//! policy objects. A CREATE or UPDATE of a HighAvailabilityPolicy, or of a
//! ConfigMap labelled `knativeha.dev/policy: "true"`, is refused
//! (`allowed: false`, code 422, reason `Invalid`) with every error `check`
//! reports for it ([`crate::policy::objects`]); anything else is allowed.
//! Same wire format, parse and answers as [`super::review`].

use serde_json::Value;

use super::{
    Answer, ResponseOut, ReviewOut, ReviewOutcome, Reviewed, StatusOut, bad_request, kind_label,
    names,
};
use crate::engine::Operation;
use crate::policy::{self, objects};

/// What a validated object is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Resource,
    ConfigMap,
}

fn target(group: &str, kind: &str) -> Option<Target> {
    match (group, kind) {
        (policy::GROUP, policy::KIND) => Some(Target::Resource),
        ("", "ConfigMap") => Some(Target::ConfigMap),
        _ => None,
    }
}

/// Every error of the object, as lines, or the warnings of the valid
/// policy ([`policy::reach`]); `None` when the object is not a policy
/// object (a ConfigMap without the label).
fn errors_of(target: Target, object: &Value) -> Option<Result<Vec<String>, Vec<String>>> {
    let checked = match target {
        Target::Resource => objects::check_resource(object).map_err(|errors| {
            errors
                .iter()
                .flat_map(policy::PolicyError::flatten)
                .map(|e| e.to_string())
                .collect()
        }),
        Target::ConfigMap if objects::is_policy_configmap(object) => {
            objects::check_configmap_data(object)
        }
        Target::ConfigMap => return None,
    };
    Some(checked.map(|p| {
        policy::reach::warnings(&p.spec)
            .into_iter()
            .map(|w| format!("knative-ha-webhook: policy {}: {w}", p.name))
            .collect()
    }))
}

/// Answers one validating AdmissionReview given as raw bytes.
pub fn validate(body: &[u8]) -> Answer<'_> {
    let (parsed, operation, op_label) = match super::open(body) {
        Ok(opened) => opened,
        Err(message) => return bad_request(message),
    };
    let request = parsed.request;
    let (group, kind) = request
        .kind
        .as_ref()
        .map_or(("", ""), |k| (k.group.0.as_ref(), k.kind.0.as_ref()));
    let target = target(group, kind);
    let (namespace, name) = names(
        request.namespace.map(|t| t.0),
        request.name.map(|t| t.0),
        request.object,
    );
    let mut reply = Reviewed::skipped(kind_label(kind), op_label, request.uid.0, namespace, name);
    let mut response = ResponseOut::allowed();
    let checked = match (operation, target, request.object) {
        (Operation::Create | Operation::Update, Some(target), Some(raw)) => {
            match serde_json::from_str::<Value>(raw.get()) {
                Ok(object) => errors_of(target, &object),
                Err(e) => return bad_request(super::BadReview::Object(e)),
            }
        }
        _ => None,
    };
    match checked {
        None => {}
        Some(Ok(warnings)) => {
            reply.outcome = ReviewOutcome::Accepted;
            response.warnings = warnings;
        }
        Some(Err(errors)) => refuse(&mut reply, &mut response, &errors),
    }
    response.uid = &reply.uid;
    let out = ReviewOut {
        api_version: &parsed.api_version,
        kind: &parsed.kind,
        response,
    };
    // Plain data (strings, booleans, numbers): serialising it cannot fail.
    reply.body = serde_json::to_vec(&out).unwrap_or_default();
    Answer::Reviewed(reply)
}

/// Writes the refusal: every error in the message (the log line gets it
/// too, as the review's error).
fn refuse(reply: &mut Reviewed<'_>, response: &mut ResponseOut<'_>, errors: &[String]) {
    let what = match reply.kind {
        "ConfigMap" => format!("policy ConfigMap {}/{}", reply.namespace, reply.name),
        kind => format!("{kind} {}", reply.name),
    };
    let message = format!(
        "knative-ha-webhook: {what} is invalid: {}",
        errors.join("; ")
    );
    reply.outcome = ReviewOutcome::Refused;
    reply.error = Some(errors.join("; "));
    response.allowed = false;
    response.status = Some(StatusOut {
        status: "Failure",
        code: 422,
        reason: Some("Invalid"),
        message,
    });
}
