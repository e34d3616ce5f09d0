//! Property tests of the `POST /mutate` handler core, `admission::review`
//! (the `cargo test` versions of `fuzz/fuzz_targets/review_*.rs`): arbitrary
//! bytes, arbitrary JSON, AdmissionReview-shaped JSON and real Knative
//! reviews with a few fields mutated. Whatever comes in, no panic and a
//! well-formed answer (see `testkit/src/oracle.rs`): 200 with an
//! AdmissionReview that mirrors the request's uid/apiVersion/kind and whose
//! patch, if any, is base64 of a patch that applies and only where a policy
//! governs; or an error status with a JSON body that says what is wrong.
//! The same bytes always get the same answer.

use std::sync::LazyLock;

use arbitrary::Unstructured;
use knative_ha_webhook::admission::{OnError, ReviewOptions};
use knative_ha_webhook::engine::Snapshot;
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::support;
use crate::support::fuzzgen;
use crate::support::oracle;
use support::corpus;

static SNAPSHOT: LazyLock<Snapshot> = LazyLock::new(oracle::example_snapshot);
static UNSYNCED: LazyLock<Snapshot> = LazyLock::new(|| Snapshot {
    synced: false,
    ..SNAPSHOT.clone()
});

/// Real reviews: every governed Knative object, CREATE/UPDATE/DELETE, in the
/// governed and an ungoverned namespace.
static REVIEWS: LazyLock<Vec<(String, Value)>> = LazyLock::new(|| {
    let mut out = Vec::new();
    for (label, object) in corpus::governed_objects() {
        for op in ["CREATE", "UPDATE", "DELETE"] {
            for ns in [corpus::GOVERNED, corpus::UNGOVERNED] {
                let uid = format!("uid-{label}-{op}-{ns}");
                out.push((
                    format!("{op} {ns} {label}"),
                    corpus::review(&uid, op, ns, &object),
                ));
            }
        }
    }
    out
});

const OPTIONS: [ReviewOptions; 2] = [
    ReviewOptions {
        on_error: OnError::Allow,
        undo_unclaimed: false,
    },
    ReviewOptions {
        on_error: OnError::Deny,
        undo_unclaimed: false,
    },
];

/// Answers `bytes` with every snapshot/option combination and checks each.
fn check_bytes(bytes: &[u8]) -> Result<(), String> {
    for snapshot in [&*SNAPSHOT, &*UNSYNCED] {
        for opts in &OPTIONS {
            let reply = oracle::review(snapshot, bytes, opts);
            oracle::check_reply(snapshot, opts, bytes, &reply).map_err(|e| {
                format!(
                    "{e}\nsynced {} on_error {:?}\nrequest: {}\nreply: {}",
                    snapshot.synced,
                    opts.on_error,
                    String::from_utf8_lossy(bytes),
                    reply.body
                )
            })?;
            let again = oracle::review(snapshot, bytes, opts);
            if again.status != reply.status || again.body != reply.body {
                return Err(format!(
                    "the same request got two answers: {} / {}",
                    reply.body, again.body
                ));
            }
        }
    }
    Ok(())
}

/// Checks the review with its keys sorted (`object` before `operation`)
/// and in the API server's order: both get the same answer (the same
/// status for a bad request).
fn check_value(v: &Value) -> Result<(), String> {
    let sorted = serde_json::to_vec(v).expect("serialisable");
    let api = corpus::api_order(v);
    check_bytes(&sorted)?;
    check_bytes(&api)?;
    for snapshot in [&*SNAPSHOT, &*UNSYNCED] {
        for opts in &OPTIONS {
            let (a, b) = (
                oracle::review(snapshot, &sorted, opts),
                oracle::review(snapshot, &api, opts),
            );
            // A bad request's message names the column of the first
            // fault, which moves with the order: there, the status counts.
            let same = match a.status {
                200 => (a.status, &a.body) == (b.status, &b.body),
                _ => a.status == b.status,
            };
            if !same {
                return Err(format!(
                    "the order of the request's members changed the answer:\n\
                     sorted: {} {}\napi order: {} {}\nrequest: {v}",
                    a.status, a.body, b.status, b.body
                ));
            }
        }
    }
    Ok(())
}

#[test]
fn every_real_review_gets_a_well_formed_answer() {
    let mut patched = 0;
    for (label, review) in REVIEWS.iter() {
        check_value(review).unwrap_or_else(|e| panic!("{label}: {e}"));
        let bytes = serde_json::to_vec(review).unwrap();
        let reply = oracle::review(&SNAPSHOT, &bytes, &ReviewOptions::default());
        assert_eq!(reply.status, 200, "{label}");
        if reply.body["response"].get("patch").is_some() {
            patched += 1;
        }
    }
    // Governed CREATE and UPDATE of the 8 objects the example policy changes.
    assert!(patched >= 16, "only {patched} reviews got a patch");
}

#[test]
fn the_oracle_rejects_broken_replies() {
    // Each case breaks one property of a good reply; the oracle must say so.
    let review = corpus::review(
        "u-1",
        "CREATE",
        corpus::GOVERNED,
        &corpus::controller_deployment(),
    );
    let bytes = serde_json::to_vec(&review).unwrap();
    let opts = ReviewOptions::default();
    let good = oracle::review(&SNAPSHOT, &bytes, &opts);
    oracle::check_reply(&SNAPSHOT, &opts, &bytes, &good).expect("a good reply passes");
    assert!(
        good.body["response"]["patch"].is_string(),
        "the controller gets a patch"
    );

    type Break = fn(&mut oracle::Reply);
    let cases: &[(&str, Break, &str)] = &[
        (
            "uid changed",
            |r| r.body["response"]["uid"] = json!("other"),
            "uid",
        ),
        (
            "apiVersion changed",
            |r| r.body["apiVersion"] = json!("admission.k8s.io/v1beta1"),
            "apiVersion",
        ),
        (
            "allowed missing",
            |r| {
                r.body["response"]
                    .as_object_mut()
                    .unwrap()
                    .remove("allowed");
            },
            "allowed",
        ),
        (
            "refused under allow",
            |r| r.body["response"]["allowed"] = json!(false),
            "refused",
        ),
        (
            "patch not base64",
            |r| r.body["response"]["patch"] = json!("[{not base64"),
            "base64",
        ),
        (
            "patch as numbers",
            |r| r.body["response"]["patch"] = json!([91, 93]),
            "not a string",
        ),
        (
            "patch that does not apply",
            |r| {
                let bad = base64::Engine::encode(
                    &base64::engine::general_purpose::STANDARD,
                    br#"[{"op":"replace","path":"/no/such/field","value":1}]"#,
                );
                r.body["response"]["patch"] = json!(bad);
            },
            "does not apply",
        ),
        (
            "patchType missing",
            |r| {
                r.body["response"]
                    .as_object_mut()
                    .unwrap()
                    .remove("patchType");
            },
            "patchType",
        ),
        (
            "warnings not strings",
            |r| r.body["response"]["warnings"] = json!([1]),
            "warnings",
        ),
        (
            "error without message",
            |r| {
                r.status = 400;
                r.body = json!({"code": 400});
            },
            "message",
        ),
        (
            "error code differs",
            |r| {
                r.status = 400;
                r.body = json!({"code": 500, "message": "x"});
            },
            "code",
        ),
    ];
    for (name, break_it, want) in cases {
        let mut reply = good.clone();
        break_it(&mut reply);
        let err = oracle::check_reply(&SNAPSHOT, &opts, &bytes, &reply)
            .err()
            .unwrap_or_else(|| panic!("{name}: the oracle accepted a broken reply"));
        assert!(err.contains(want), "{name}: {err}");
    }

    // The same patch for the same object in an ungoverned namespace is a breach.
    let elsewhere = corpus::review(
        "u-1",
        "CREATE",
        corpus::UNGOVERNED,
        &corpus::controller_deployment(),
    );
    let elsewhere = serde_json::to_vec(&elsewhere).unwrap();
    let err = oracle::check_reply(&SNAPSHOT, &opts, &elsewhere, &good).unwrap_err();
    assert!(err.contains("ungoverned"), "{err}");
}

#[test]
fn every_prefix_of_a_real_review_is_answered() {
    // What a client that dies mid-body, or a proxy that truncates, sends.
    let review = corpus::review(
        "u-trunc",
        "UPDATE",
        corpus::GOVERNED,
        &corpus::controller_deployment(),
    );
    let bytes = serde_json::to_vec(&review).unwrap();
    for end in (0..bytes.len()).step_by(7) {
        check_bytes(&bytes[..end]).unwrap_or_else(|e| panic!("prefix {end}: {e}"));
        let reply = oracle::review(&SNAPSHOT, &bytes[..end], &ReviewOptions::default());
        assert_eq!(
            reply.status,
            400,
            "prefix {end} of {} accepted",
            bytes.len()
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_get_a_well_formed_answer(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        check_bytes(&bytes).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn arbitrary_json_gets_a_well_formed_answer(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let mut u = Unstructured::new(&bytes);
        let value = if u.ratio(1, 2).unwrap_or(false) {
            fuzzgen::review_like(&mut u)
        } else {
            fuzzgen::json(&mut u, 4)
        };
        if let Ok(value) = value {
            check_value(&value).map_err(TestCaseError::fail)?;
        }
    }

    #[test]
    fn mutated_real_reviews_get_a_well_formed_answer(bytes in proptest::collection::vec(any::<u8>(), 16..512)) {
        let mut u = Unstructured::new(&bytes);
        let Ok((_, base)) = u.choose(&REVIEWS) else { return Ok(()) };
        // Mostly inside the request (uid, namespace, operation, the object).
        let prefix = if u.ratio(4, 5).unwrap_or(true) { "/request" } else { "" };
        if let Ok(review) = fuzzgen::mutate(&mut u, base, prefix) {
            check_value(&review).map_err(TestCaseError::fail)?;
        }
    }
}

#[test]
fn an_empty_object_namespace_is_the_requests() {
    // Found by `cargo fuzz run review_mutated`: the API server fills an empty
    // metadata.namespace from the request, so such an object is governed and
    // patched, and the oracle must accept that.
    let mut object = corpus::controller_deployment();
    object["metadata"]["namespace"] = json!("");
    let mut review = corpus::review("u-empty-ns", "CREATE", corpus::GOVERNED, &object);
    review["request"]["object"]["metadata"]["namespace"] = json!("");
    let bytes = serde_json::to_vec(&review).unwrap();
    let reply = oracle::review(&SNAPSHOT, &bytes, &ReviewOptions::default());
    assert!(
        reply.body["response"]["patch"].is_string(),
        "{}",
        reply.body
    );
    check_bytes(&bytes).unwrap();
}
