//! What the fuzz targets share: the corpus of real Knative objects and
//! reviews, the input generators and the properties every answer must have
//! (the same files the robustness tests in `tests/robustness_*.rs` use).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use knative_ha_webhook::admission::{OnError, ReviewOptions};
use knative_ha_webhook::policy::Policy;
use knative_ha_webhook::store::Snapshot;

#[path = "../../tests/support/corpus.rs"]
pub mod corpus;
#[path = "../../tests/support/fuzzgen.rs"]
pub mod fuzzgen;
#[path = "../../tests/support/oracle.rs"]
pub mod oracle;

/// The example policy, synced, with the HPA targets of the manifests.
pub static SNAPSHOT: LazyLock<Snapshot> = LazyLock::new(|| {
    let policy = Policy::from_yaml(corpus::POLICY_YAML).expect("examples/policy.yaml");
    let mut snapshot = Snapshot::from_policies([policy]);
    snapshot.hpa_targets = BTreeMap::from([(
        corpus::GOVERNED.to_string(),
        BTreeSet::from(["activator".to_string(), "webhook".to_string()]),
    )]);
    snapshot
});

/// Answers `bytes` under `--on-error allow` and `deny` and panics, with the
/// broken property, on any answer that is not well formed or not repeatable.
pub fn check_review(bytes: &[u8]) {
    for on_error in [OnError::Allow, OnError::Deny] {
        let opts = ReviewOptions { on_error };
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
