//! The properties every answer of `admission::review` must have, whatever
//! the request bytes (shared by `tests/it/robustness_review.rs` and the fuzz
//! targets). `check_reply` returns which property broke.
#![allow(dead_code)]

use std::collections::BTreeMap;

use base64::Engine as _;
use knative_ha_webhook::admission::{self, OnError, ReviewOptions};
use knative_ha_webhook::engine::Snapshot;
use knative_ha_webhook::policy::Policy;
use serde_json::Value;

use crate::corpus;

/// What the fuzz targets and the robustness tests answer with:
/// `examples/policy.yaml`, synced, with the manifests' HPA targets
/// ([`corpus::hpa_targets`]) in the governed namespace.
pub fn example_snapshot() -> Snapshot {
    let policy = Policy::from_yaml(corpus::POLICY_YAML).expect("examples/policy.yaml");
    let mut snapshot = Snapshot::from_policies([policy]);
    snapshot.hpa_targets = BTreeMap::from([(corpus::GOVERNED.to_string(), corpus::hpa_targets())]);
    snapshot
}

/// An answer as `POST /mutate` sends it: the HTTP status and the JSON body.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
}

/// `admission::review` with the status and body the server sends for it.
pub fn review(snapshot: &Snapshot, bytes: &[u8], opts: &ReviewOptions) -> Reply {
    let (status, body) =
        knative_ha_webhook::server::http_answer(admission::review(snapshot, bytes, opts));
    Reply {
        status: status.as_u16(),
        body: serde_json::from_slice(&body).expect("every answer is JSON"),
    }
}

pub fn check_reply(
    snapshot: &Snapshot,
    opts: &ReviewOptions,
    request: &[u8],
    reply: &Reply,
) -> Result<(), String> {
    if reply.status != 200 {
        // A JSON error body that says what is wrong.
        if !(400..600).contains(&reply.status) {
            return Err(format!(
                "status {} is neither 200 nor an error",
                reply.status
            ));
        }
        let message = reply.body["message"].as_str().unwrap_or("");
        if message.is_empty() {
            return Err(format!(
                "error {} without a message: {}",
                reply.status, reply.body
            ));
        }
        if reply.body["code"] != reply.status {
            return Err(format!(
                "error body code differs from status {}: {}",
                reply.status, reply.body
            ));
        }
        return Ok(());
    }

    let req: Value = serde_json::from_slice(request)
        .map_err(|e| format!("200 for a body that is not JSON ({e})"))?;
    let body = &reply.body;
    if body["kind"] != "AdmissionReview" || body["kind"] != req["kind"] {
        return Err(format!(
            "reply kind {} does not mirror {}",
            body["kind"], req["kind"]
        ));
    }
    if body["apiVersion"] != req["apiVersion"]
        || !body["apiVersion"]
            .as_str()
            .unwrap_or("")
            .starts_with("admission.k8s.io/")
    {
        return Err(format!(
            "reply apiVersion {} does not mirror {}",
            body["apiVersion"], req["apiVersion"]
        ));
    }
    let request = &req["request"];
    let response = body["response"]
        .as_object()
        .ok_or_else(|| format!("200 without a response object: {body}"))?;
    let uid = request["uid"]
        .as_str()
        .ok_or("200 for a request without a string uid")?;
    if response.get("uid").and_then(Value::as_str) != Some(uid) {
        return Err(format!(
            "uid {uid:?} answered with {:?}",
            response.get("uid")
        ));
    }
    let allowed = response
        .get("allowed")
        .and_then(Value::as_bool)
        .ok_or("response.allowed is not a boolean")?;
    if let Some(warnings) = response.get("warnings") {
        let ok = warnings
            .as_array()
            .is_some_and(|w| w.iter().all(|s| s.as_str().is_some_and(|s| !s.is_empty())));
        if !ok {
            return Err(format!("warnings are not a list of strings: {warnings}"));
        }
    }
    if !allowed {
        if opts.on_error != OnError::Deny {
            return Err("refused although --on-error allow".to_string());
        }
        if response.contains_key("patch") {
            return Err("refused with a patch".to_string());
        }
        let message = response
            .get("status")
            .and_then(|s| s.get("message"))
            .and_then(Value::as_str)
            .unwrap_or("");
        if message.is_empty() {
            return Err("refused without a status message".to_string());
        }
        return Ok(());
    }
    let Some(patch) = response.get("patch") else {
        if response.contains_key("patchType") {
            return Err("patchType without a patch".to_string());
        }
        return Ok(());
    };

    // A patch: only where a policy governs, only on CREATE/UPDATE, standard
    // base64 of an RFC 6902 patch that applies to the object.
    if response.get("patchType").and_then(Value::as_str) != Some("JSONPatch") {
        return Err(format!(
            "patch with patchType {:?}",
            response.get("patchType")
        ));
    }
    let op = request["operation"].as_str().unwrap_or("");
    if op != "CREATE" && op != "UPDATE" {
        return Err(format!("patch on operation {op:?}"));
    }
    if !snapshot.synced {
        return Err("patch while the snapshot is not synced".to_string());
    }
    let namespace = request["namespace"]
        .as_str()
        .filter(|ns| !ns.is_empty())
        .or_else(|| request["object"]["metadata"]["namespace"].as_str())
        .unwrap_or("");
    if snapshot.policy_for(namespace).is_none() {
        return Err(format!("patch in ungoverned namespace {namespace:?}"));
    }
    // An empty metadata.namespace is unset: the API server fills it from the
    // request (a fuzz finding, for the oracle, not the server).
    if let Some(own) = request["object"]["metadata"]["namespace"].as_str()
        && !own.is_empty()
        && own != namespace
    {
        return Err(format!(
            "patch for an object whose metadata.namespace {own:?} is not the request's {namespace:?}"
        ));
    }
    let encoded = patch.as_str().ok_or("patch is not a string")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|e| format!("patch is not standard base64: {e}"))?;
    let ops: json_patch::Patch = serde_json::from_slice(&decoded)
        .map_err(|e| format!("patch is not an RFC 6902 patch: {e}"))?;
    if ops.0.is_empty() {
        return Err("an empty patch is sent".to_string());
    }
    let mut object = request["object"].clone();
    json_patch::patch(&mut object, &ops).map_err(|e| format!("patch does not apply: {e}"))?;
    Ok(())
}
