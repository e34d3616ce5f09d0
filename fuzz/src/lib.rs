//! What the fuzz targets share: the corpus of real Knative objects and
//! reviews, the input generators and the properties every answer must have
//! (the `testkit` crate, which the robustness tests in `tests/it/robustness_*.rs`
//! use too).

use std::sync::LazyLock;

use knative_ha_webhook::admission::{OnError, ReviewOptions};
use knative_ha_webhook::engine::Snapshot;

pub use testkit::{corpus, fuzzgen, oracle};

/// The example policy, synced, with the HPA targets of the manifests.
pub static SNAPSHOT: LazyLock<Snapshot> = LazyLock::new(oracle::example_snapshot);

/// Answers `bytes` under `--on-error allow` and `deny` and panics, with the
/// broken property, on any answer that is not well formed or not repeatable.
pub fn check_review(bytes: &[u8]) {
    for on_error in [OnError::Allow, OnError::Deny] {
        let opts = ReviewOptions {
            on_error,
            ..ReviewOptions::default()
        };
        let reply = oracle::review(&SNAPSHOT, bytes, &opts);
        if let Err(e) = oracle::check_reply(&SNAPSHOT, &opts, bytes, &reply) {
            panic!("{e}\nreply: {}", reply.body);
        }
        let again = oracle::review(&SNAPSHOT, bytes, &opts);
        assert!(
            again.status == reply.status && again.body == reply.body,
            "the same request got two answers"
        );
    }
}
