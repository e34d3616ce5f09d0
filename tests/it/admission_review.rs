//! `admission::review` on its own: the answers, statuses and outcomes of
//! reviews read back as the HTTP layer sends them.

use base64::Engine as _;
use knative_ha_webhook::admission::*;
use knative_ha_webhook::engine::Snapshot;
use knative_ha_webhook::policy::Policy;
use serde_json::Value;

/// An answer as the HTTP layer sends it (status from `server::routes`).
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) body: Value,
    pub(crate) outcome: ReviewOutcome,
    pub(crate) namespace: String,
    pub(crate) error: Option<String>,
}

/// [`super::review`], its answer read back as status and JSON.
pub(crate) fn review(snapshot: &Snapshot, body: &[u8], opts: &ReviewOptions) -> Reply {
    let answer = knative_ha_webhook::admission::review(snapshot, body, opts);
    let outcome = answer.outcome();
    let (namespace, error) = match &answer {
        Answer::Reviewed(r) => (r.namespace.to_string(), r.error.clone()),
        Answer::BadRequest(b) => (String::new(), Some(b.reason.clone())),
    };
    let (status, body) = knative_ha_webhook::server::http_answer(answer);
    Reply {
        status: status.as_u16(),
        body: serde_json::from_slice(&body).expect("the answer is JSON"),
        outcome,
        namespace,
        error,
    }
}

fn snapshot() -> Snapshot {
    let policy = Policy::from_yaml(include_str!("../../examples/policy.yaml")).unwrap();
    Snapshot::from_policies([policy])
}

pub(crate) fn review_json(op: &str, ns: &str, object: Value) -> Vec<u8> {
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
        assert_eq!(reply.outcome, ReviewOutcome::BadRequest, "{name}");
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
    assert_eq!(reply.outcome, ReviewOutcome::NotSynced);
    assert_eq!(reply.body["response"]["warnings"][0], NOT_SYNCED_WARNING);
    assert_eq!(reply.body["response"]["allowed"], true);
    assert!(reply.body["response"].get("patch").is_none());
}

#[test]
fn engine_error_allow_and_deny() {
    let body = review_json("CREATE", "knative-serving", serde_json::json!([1, 2]));
    let allow = review(&snapshot(), &body, &ReviewOptions::default());
    assert_eq!(allow.outcome, ReviewOutcome::ErrorAllowed);
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
            ..ReviewOptions::default()
        },
    );
    assert_eq!(deny.outcome, ReviewOutcome::ErrorDenied);
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
    assert_ne!(reply.outcome, ReviewOutcome::Skipped);
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

#[test]
fn ungoverned_and_delete_reviews_never_build_the_object() {
    // A number no `Value` can hold, deep in the object: only a parse of the
    // object would notice it.
    let object = r#"{"metadata": {"name": "x"}, "spec": {"replicas": 1e400}}"#;
    let body = |op: &str, ns: &str| {
        format!(
            r#"{{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{{"uid":"u","operation":"{op}","namespace":"{ns}","kind":{{"kind":"Deployment"}},"object":{object}}}}}"#
        )
    };
    for (op, ns) in [("CREATE", "default"), ("DELETE", "knative-serving")] {
        let reply = review(
            &snapshot(),
            body(op, ns).as_bytes(),
            &ReviewOptions::default(),
        );
        assert_eq!(reply.status, 200, "{op} {ns}");
        assert_eq!(reply.outcome, ReviewOutcome::Skipped, "{op} {ns}");
    }
    // Governed, the engine reads spec.replicas: refused as before.
    let governed = review(
        &snapshot(),
        body("CREATE", "knative-serving").as_bytes(),
        &ReviewOptions::default(),
    );
    assert_eq!(governed.status, 400);
    assert!(
        governed
            .error
            .as_deref()
            .unwrap_or("")
            .contains("number out of range"),
        "{:?}",
        governed.error
    );
}

#[test]
fn names_come_from_the_object_when_the_request_has_none() {
    let body = serde_json::to_vec(&serde_json::json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u\"1", "operation": "DELETE", "kind": {"kind": "Deployment"},
                    "object": {"metadata": {"generateName": "web-", "namespace": "ns"}}}
    }))
    .unwrap();
    let Answer::Reviewed(r) =
        knative_ha_webhook::admission::review(&snapshot(), &body, &ReviewOptions::default())
    else {
        panic!("a usable review");
    };
    assert_eq!((&*r.namespace, &*r.name, &*r.uid), ("ns", "web-*", "u\"1"));
}

/// At admission: a `config-leader-election` holding the
/// legacy `retryPeriod` Knative still reads gets no `renew-deadline` that
/// would stop its leader election, and the answer says why.
#[test]
fn legacy_leader_election_keys_hold_the_durations_back_at_admission() {
    let policy = Policy::from_yaml(
        "apiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\nmetadata: {name: p}\nspec:\n  targetNamespace: knative-serving\n  leaderElection: {buckets: 2, renewDeadline: 20s}\n",
    )
    .unwrap();
    let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "config-leader-election", "namespace": "knative-serving"},
        "data": {"retryPeriod": "30s"}});
    let reply = review(
        &Snapshot::from_policies([policy]),
        &review_json("UPDATE", "knative-serving", cm),
        &ReviewOptions::default(),
    );
    let response = &reply.body["response"];
    assert_eq!(response["allowed"], true);
    use base64::Engine as _;
    let patch = base64::engine::general_purpose::STANDARD
        .decode(response["patch"].as_str().expect("buckets are written"))
        .unwrap();
    let patch: Value = serde_json::from_slice(&patch).unwrap();
    // The buckets, the record of the release value they replace (`restore`)
    // and of the engine's write.
    assert_eq!(
        patch,
        serde_json::json!([
            {"op": "add", "path": "/metadata/annotations",
             "value": {"knativeha.dev/original-data-buckets": "null"}},
            {"op": "add", "path": "/data/buckets", "value": "2"},
            {"op": "add", "path": "/metadata/annotations/knativeha.dev~1written-data-buckets",
             "value": "\"2\""}
        ])
    );
    let warnings = response["warnings"].as_array().unwrap();
    assert!(
        warnings.iter().any(|w| w.as_str().unwrap().contains(
            "leader election durations not written: renew-deadline \"20s\" (policy) must be greater than retryPeriod \"30s\" (ConfigMap, legacy key Knative still reads)"
        )),
        "{warnings:?}"
    );
}
