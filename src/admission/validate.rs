//! The pure core of `POST /validate`: the validating admission review of
//! policy objects. A CREATE or UPDATE of a HighAvailabilityPolicy, or of a
//! ConfigMap labelled `knativeha.dev/policy: "true"`, is refused
//! (`allowed: false`, code 422, reason `Invalid`) with every error `check`
//! reports for it ([`crate::policy::objects`]); anything else is allowed.
//! Same wire format, parse and answers as [`super::review`].

use serde_json::Value;

use super::{Answer, ResponseOut, ReviewOutcome, Reviewed, StatusOut, answered, bad_request};
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
    let (parsed, operation, mut reply) = match super::open(body) {
        Ok(opened) => opened,
        Err(message) => return bad_request(message),
    };
    let gvk = parsed.request.kind.as_ref();
    let target = gvk.and_then(|k| target(&k.group.0, &k.kind.0));
    let mut response = ResponseOut::allowed();
    let checked = match (operation, target, parsed.request.object) {
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
    answered(&parsed, &mut reply, response);
    Answer::Reviewed(reply)
}

/// Writes the refusal: every error in the message (the log line gets it
/// too, as the review's error).
fn refuse(reply: &mut Reviewed<'_>, response: &mut ResponseOut<'_>, errors: &[String]) {
    let what = match reply.kind {
        "ConfigMap" => format!("policy ConfigMap {}/{}", reply.namespace, reply.name),
        kind => format!("{kind} {}", reply.name),
    };
    let errors = errors.join("; ");
    let message = format!("knative-ha-webhook: {what} is invalid: {errors}");
    reply.outcome = ReviewOutcome::Refused;
    reply.error = Some(errors);
    response.allowed = false;
    response.status = Some(StatusOut {
        status: "Failure",
        code: 422,
        reason: Some("Invalid"),
        message,
    });
}
