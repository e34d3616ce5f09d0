//! The request bodies `scripts/measure/bench-load` and `scripts/measure/soak` send are real
//! AdmissionReviews built from the Knative v1.23.0 fixtures. They are
//! committed (so the scripts need nothing but wrk and curl) and this test
//! keeps them equal to what the shared corpus builds.
//! `KHW_BLESS=1 cargo test --test it robustness_bench_bodies::` rewrites them.

use std::path::PathBuf;

use serde_json::Value;

use crate::support;
use support::corpus;

fn bodies() -> Vec<(&'static str, Value)> {
    let controller = corpus::controller_deployment();
    vec![
        (
            "review-governed.json",
            corpus::review(
                "2b4e7c9a-0d1f-4a53-9c2e-6f1b8d3a5e70",
                "CREATE",
                corpus::GOVERNED,
                &controller,
            ),
        ),
        (
            "review-ungoverned.json",
            corpus::review(
                "7f3a1c2e-9b4d-4e8f-a6c5-1d2e3f4a5b6c",
                "CREATE",
                corpus::UNGOVERNED,
                &controller,
            ),
        ),
    ]
}

#[test]
fn committed_bench_bodies_are_the_corpus_reviews() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/measure/bench");
    let bless = std::env::var_os("KHW_BLESS").is_some();
    for (file, expected) in bodies() {
        let path = dir.join(file);
        // In the API server's member order: the operation and namespace
        // come before the object, as in a real review.
        let mut want = corpus::api_order(&expected);
        want.push(b'\n');
        if bless {
            std::fs::write(&path, &want).unwrap();
        }
        let text = std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: {e} (run with KHW_BLESS=1)", path.display()));
        let actual: Value = serde_json::from_slice(&text).unwrap();
        assert_eq!(actual, expected, "{file} is stale: run with KHW_BLESS=1");
        assert!(
            text == want,
            "{file} is not in the API server's order: run with KHW_BLESS=1"
        );
    }
}

#[test]
fn governed_body_is_a_create_of_the_controller_deployment_in_knative_serving() {
    let (_, review) = &bodies()[0];
    let req = &review["request"];
    assert_eq!(req["operation"], "CREATE");
    assert_eq!(req["namespace"], "knative-serving");
    assert_eq!(req["object"]["kind"], "Deployment");
    assert_eq!(req["object"]["metadata"]["name"], "controller");
    assert_eq!(req["object"]["metadata"]["namespace"], "knative-serving");
    assert_eq!(req["kind"]["group"], "apps");
    let (_, other) = &bodies()[1];
    assert_eq!(other["request"]["namespace"], "default");
    assert_eq!(
        other["request"]["object"]["metadata"]["namespace"],
        "default"
    );
}
