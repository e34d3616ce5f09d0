use super::*;
use crate::policy::Policy;

/// An answer as the HTTP layer sends it (status from `server::routes`).
struct Reply {
    status: u16,
    body: Value,
    outcome: ReviewOutcome,
    namespace: String,
    error: Option<String>,
}

/// [`super::review`], its answer read back as status and JSON.
fn review(snapshot: &Snapshot, body: &[u8], opts: &ReviewOptions) -> Reply {
    let answer = super::review(snapshot, body, opts);
    let outcome = answer.outcome();
    let (namespace, error) = match &answer {
        Answer::Reviewed(r) => (r.namespace.to_string(), r.error.clone()),
        Answer::BadRequest(b) => (String::new(), Some(b.reason.clone())),
    };
    let (status, body) = crate::server::http_answer(answer);
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
    let Answer::Reviewed(r) = super::review(&snapshot(), &body, &ReviewOptions::default()) else {
        panic!("a usable review");
    };
    assert_eq!((&*r.namespace, &*r.name, &*r.uid), ("ns", "web-*", "u\"1"));
}

/// Issue 22 item 1 at admission: a `config-leader-election` holding the
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

/// activator-pdb as the release's next `kubectl apply` sends it after the
/// policy was deleted: the apply re-adds the release's `minAvailable`
/// beside the engine's `maxUnavailable` (the API server refuses both), and
/// the engine's records are still there.
fn reapplied_pdb() -> Value {
    serde_json::json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "activator-pdb", "namespace": "knative-serving",
            "annotations": {
                "knativeha.dev/original-budget": "{\"minAvailable\":\"80%\"}",
                "knativeha.dev/written-budget": "{\"maxUnavailable\":1}"}},
        "spec": {"minAvailable": "80%", "maxUnavailable": 1,
                 "selector": {"matchLabels": {"app": "activator"}}}
    })
}

fn patched(reply: &Reply, object: &Value) -> Option<Value> {
    let patch = reply.body["response"]["patch"].as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(patch)
        .unwrap();
    let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
    let mut out = object.clone();
    json_patch::patch(&mut out, &patch).unwrap();
    Some(out)
}

/// Synced, and no policy object at all (the policy was deleted).
fn no_policy_object() -> Snapshot {
    Snapshot::from_policies([])
}

/// Issue 22 item 5: with no policy object left for the namespace, an object
/// carrying the engine's records gets them undone at admission, and the
/// answer says why.
#[test]
fn no_policy_object_undoes_the_records_of_an_object() {
    let mut pdb = reapplied_pdb();
    // What the view leaves out stays: the patch is computed on the view.
    pdb["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] =
        serde_json::json!("{}");
    let reply = review(
        &no_policy_object(),
        &review_json("UPDATE", "knative-serving", pdb.clone()),
        &ReviewOptions::default(),
    );
    assert_eq!(reply.outcome, ReviewOutcome::Patched);
    let after = patched(&reply, &pdb).expect("a patch");
    assert_eq!(
        after["spec"],
        serde_json::json!({"minAvailable": "80%", "selector": {"matchLabels": {"app": "activator"}}}),
        "the release's budget alone"
    );
    let annotations = after["metadata"]["annotations"].as_object().unwrap();
    assert!(
        !annotations.keys().any(|k| k.starts_with("knativeha.dev/")),
        "records removed: {after}"
    );
    assert_eq!(
        annotations["kubectl.kubernetes.io/last-applied-configuration"], "{}",
        "the other annotations are kept: {after}"
    );
    let warnings = reply.body["response"]["warnings"].as_array().unwrap();
    assert!(
        !warnings.is_empty()
            && warnings.iter().all(|w| w
                .as_str()
                .unwrap()
                .contains("no policy governs the namespace any more")),
        "{warnings:?}"
    );
}

#[test]
fn no_policy_object_leaves_an_object_without_records_alone() {
    let mut pdb = reapplied_pdb();
    pdb["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("annotations");
    // A number no `Value` can hold: only building the object would see it.
    pdb["spec"]["selector"]["x"] = serde_json::json!(0);
    let body = String::from_utf8(review_json("UPDATE", "knative-serving", pdb))
        .unwrap()
        .replace("\"x\":0", "\"x\":1e400");
    let reply = review(
        &no_policy_object(),
        body.as_bytes(),
        &ReviewOptions::default(),
    );
    assert_eq!((reply.status, reply.outcome), (200, ReviewOutcome::Skipped));
    assert!(reply.body["response"].get("patch").is_none());
    assert!(reply.body["response"].get("warnings").is_none());
}

/// A policy object that exists but is not in force (invalid, in conflict,
/// outside --governed-namespaces), or sources not synced yet: never undone
/// (it would lower HA behind a typo or a restart).
#[test]
fn a_policy_object_not_in_force_or_no_sync_undoes_nothing() {
    let pdb = reapplied_pdb();
    let body = review_json("UPDATE", "knative-serving", pdb);
    let mut claimed = no_policy_object();
    claimed.unclaimed = crate::store::Unclaimed::all_but(["knative-serving".to_string()]);
    let mut unknown = no_policy_object();
    unknown.unclaimed = crate::store::Unclaimed::Unknown;
    let mut unsynced = no_policy_object();
    unsynced.synced = false;
    for (name, snapshot, outcome) in [
        ("claimed", claimed, ReviewOutcome::Skipped),
        ("unknown", unknown, ReviewOutcome::Skipped),
        ("not synced", unsynced, ReviewOutcome::NotSynced),
    ] {
        let reply = review(&snapshot, &body, &ReviewOptions::default());
        assert_eq!(reply.outcome, outcome, "{name}");
        assert!(reply.body["response"].get("patch").is_none(), "{name}");
    }
}

/// The pod template's labels (left out of the view) survive the hash's
/// removal where no policy object exists: Deployment's selector needs them.
#[test]
fn no_policy_object_keeps_what_the_view_leaves_out_of_a_deployment() {
    let deployment = serde_json::json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "controller", "namespace": "knative-serving",
            "annotations": {"knativeha.dev/original-replicas": "1"}},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "controller"}},
            "template": {
                "metadata": {"labels": {"app": "controller"},
                    "annotations": {"knativeha.dev/leader-election-hash": "a94b58b82d50d865"}},
                "spec": {"containers": [{"name": "controller", "image": "i"}]}}}
    });
    let reply = review(
        &no_policy_object(),
        &review_json("UPDATE", "knative-serving", deployment.clone()),
        &ReviewOptions::default(),
    );
    let after = patched(&reply, &deployment).expect("a patch");
    assert_eq!(after["spec"]["replicas"], 1, "{after}");
    assert_eq!(
        after["spec"]["template"]["metadata"]["labels"],
        serde_json::json!({"app": "controller"}),
        "{after}"
    );
    assert!(
        after["spec"]["template"]["metadata"]["annotations"]
            .get("knativeha.dev/leader-election-hash")
            .is_none(),
        "{after}"
    );
}
