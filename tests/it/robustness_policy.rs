//! Property tests of policy parsing (the file source re-reads whatever is
//! on disk, half-written or hostile): arbitrary bytes into
//! `Policy::from_yaml`, mutated example policies into `Policy::from_json`.
//! Never a panic; a policy that is accepted drives the engine without
//! breaking its guarantees on the real Knative objects.

use std::collections::BTreeSet;
use std::sync::LazyLock;

use arbitrary::Unstructured;
use knative_ha_webhook::engine::{self, Answering, Input, Operation, Snapshot};
use knative_ha_webhook::policy::Policy;
use proptest::prelude::*;
use serde_json::Value;

use crate::support;
use crate::support::fuzzgen;
use support::corpus;

static EXAMPLE: LazyLock<Value> =
    LazyLock::new(|| serde_saphyr::from_str(corpus::POLICY_YAML).expect("examples/policy.yaml"));
static OBJECTS: LazyLock<Vec<(String, Value)>> = LazyLock::new(corpus::governed_objects);

/// An accepted policy must still produce clean, idempotent patches.
fn drive_engine(policy: &Policy) -> Result<(), String> {
    let namespace = policy.spec.target_namespace.as_str();
    let targets = BTreeSet::from(["activator".to_string()]);
    let known = Snapshot::from_policies([policy.clone()]).knowing(namespace, targets, None);
    let mutate =
        |input: &Input<'_>| engine::outcome(Answering::Governed(&known), input).map(|o| o.mutation);
    for (label, object) in OBJECTS.iter() {
        let object = corpus::in_namespace(object, namespace);
        let input = Input {
            operation: Operation::Create,
            namespace,
            object: &object,
        };
        let Ok(m) = mutate(&input) else {
            continue;
        };
        let mut patched = object.clone();
        json_patch::patch(&mut patched, &m.patch)
            .map_err(|e| format!("{label}: patch does not apply: {e}"))?;
        let again = Input {
            operation: Operation::Update,
            namespace,
            object: &patched,
        };
        match mutate(&again) {
            Ok(m2) if m2.is_empty() => {}
            other => return Err(format!("{label}: second admission gives {other:?}")),
        }
    }
    Ok(())
}

#[test]
fn the_example_policy_is_accepted_and_drives_the_engine() {
    let policy = Policy::from_json(&EXAMPLE).expect("valid");
    drive_engine(&policy).unwrap();
}

#[test]
fn truncated_example_policies_never_panic() {
    // Every prefix of the file: what a reader sees during an in-place write.
    let text = corpus::POLICY_YAML;
    let mut accepted = 0;
    for end in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
        if let Ok(policy) = Policy::from_yaml(&text[..end]) {
            accepted += 1;
            drive_engine(&policy).unwrap_or_else(|e| panic!("prefix {end}: {e}"));
        }
    }
    // The whole file is accepted; a prefix cut inside `leaderElection:`
    // (what scripts/measure/soak writes as its half-written file) is refused.
    assert!(Policy::from_yaml(text).is_ok());
    assert!(accepted >= 1);
    let cut = text
        .find("abled: true")
        .expect("the example has leaderElection.enabled");
    assert!(
        Policy::from_yaml(&text[..cut]).is_err(),
        "a policy cut inside leaderElection was accepted"
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic_the_yaml_parser(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = Policy::from_yaml(&text);
    }

    #[test]
    fn mutated_example_policies_are_refused_or_safe(bytes in proptest::collection::vec(any::<u8>(), 8..256)) {
        let mut u = Unstructured::new(&bytes);
        if let Ok(doc) = fuzzgen::mutate(&mut u, &EXAMPLE, "/spec")
            && let Ok(policy) = Policy::from_json(&doc)
            && let Err(e) = drive_engine(&policy)
        {
            return Err(TestCaseError::fail(format!("{e}\npolicy: {doc}")));
        }
    }
}
