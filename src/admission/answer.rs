//! The answer to one review: [`Answer`], and the AdmissionReview answer as
//! it goes on the wire.

use std::borrow::Cow;

use serde::Serialize;

use super::ReviewOutcome;
use super::request::ECHO_BYTES;
use crate::telemetry::clip;

/// The answer to one review.
#[derive(Clone, Debug)]
pub enum Answer<'a> {
    /// A usable AdmissionReview, answered.
    Reviewed(Reviewed<'a>),
    /// The body is not a usable AdmissionReview.
    BadRequest(BadRequest),
}

impl Answer<'_> {
    pub fn outcome(&self) -> ReviewOutcome {
        match self {
            Answer::Reviewed(r) => r.outcome,
            Answer::BadRequest(_) => ReviewOutcome::BadRequest,
        }
    }
}

/// An answered review. The names borrow from the request body.
#[derive(Clone, Debug, Default)]
pub struct Reviewed<'a> {
    /// The answer: an AdmissionReview, as JSON.
    pub body: Vec<u8>,
    pub outcome: ReviewOutcome,
    /// Bounded label: `Deployment`, `ConfigMap`, `HorizontalPodAutoscaler`,
    /// `PodDisruptionBudget`, `Scale`, `HighAvailabilityPolicy` (`/validate`)
    /// or `other`.
    pub kind: &'static str,
    /// Bounded label: `CREATE`, `UPDATE`, `DELETE` or `CONNECT`.
    pub operation: &'static str,
    pub uid: Cow<'a, str>,
    pub namespace: Cow<'a, str>,
    pub name: Cow<'a, str>,
    pub patch_ops: usize,
    /// The change lines sent as the answer's warnings (what changed and
    /// why), kept for the log line.
    pub changes: Vec<String>,
    /// The engine error, for the log line.
    pub error: Option<String>,
}

impl<'a> Reviewed<'a> {
    /// A review that changes nothing yet (outcome `Skipped`, no body).
    pub(crate) fn skipped(
        kind: &'static str,
        operation: &'static str,
        uid: Cow<'a, str>,
        namespace: Cow<'a, str>,
        name: Cow<'a, str>,
    ) -> Reviewed<'a> {
        Reviewed {
            kind,
            operation,
            uid,
            namespace,
            name,
            ..Reviewed::default()
        }
    }
}

/// Why the body is not a usable AdmissionReview (clipped: it may quote
/// the body).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadRequest {
    pub reason: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ReviewOut<'a> {
    pub(super) api_version: &'a str,
    pub(super) kind: &'a str,
    pub(super) response: ResponseOut<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ResponseOut<'a> {
    pub(super) uid: &'a str,
    pub(super) allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) patch_type: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) patch: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) warnings: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) status: Option<StatusOut>,
}

impl ResponseOut<'static> {
    /// An answer that allows the object unchanged (the uid is set last).
    pub(super) fn allowed() -> Self {
        ResponseOut {
            uid: "",
            allowed: true,
            patch_type: None,
            patch: None,
            warnings: Vec::new(),
            status: None,
        }
    }
}

#[derive(Serialize)]
pub(super) struct StatusOut {
    pub(super) status: &'static str,
    pub(super) code: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) reason: Option<&'static str>,
    pub(super) message: String,
}

pub(super) fn bad_request(why: super::BadReview) -> Answer<'static> {
    // serde's messages quote the offending content: never echo it whole.
    Answer::BadRequest(BadRequest {
        reason: clip(&why.to_string(), 4 * ECHO_BYTES),
    })
}
