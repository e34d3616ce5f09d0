//! Property tests of the engine on hostile input (the `cargo test` version
//! of `fuzz/fuzz_targets/engine_mutate.rs`): real Knative objects with a
//! few fields replaced, removed, retyped or added, and arbitrary JSON.
//! Whatever comes in, `engine::outcome` must not panic; when it returns a
//! patch, the patch applies to the object, mutating the result again yields
//! no patch, and nothing outside the governed namespace is ever patched.

use std::sync::LazyLock;

use arbitrary::Unstructured;
use knative_ha_webhook::engine::{self, Answering, Input, Operation, Snapshot};
use knative_ha_webhook::policy::Policy;
use proptest::prelude::*;
use serde_json::Value;

use crate::support;
use crate::support::fuzzgen;
use support::corpus;

static POLICY: LazyLock<Policy> =
    LazyLock::new(|| Policy::from_yaml(corpus::POLICY_YAML).expect("examples/policy.yaml"));
static OBJECTS: LazyLock<Vec<(String, Value)>> = LazyLock::new(corpus::governed_objects);

const OPERATIONS: [Operation; 4] = [
    Operation::Create,
    Operation::Update,
    Operation::Delete,
    Operation::Connect,
];

/// The properties every engine answer must have; `Err` names the broken one.
fn check(namespace: &str, operation: Operation, object: &Value) -> Result<(), String> {
    check_with(&POLICY, namespace, operation, object)
}

fn check_with(
    policy: &Policy,
    namespace: &str,
    operation: Operation,
    object: &Value,
) -> Result<(), String> {
    let known = Snapshot::from_policies([policy.clone()]).knowing(
        namespace,
        support::corpus::hpa_targets(),
        None,
    );
    let mutate =
        |input: &Input<'_>| engine::outcome(Answering::Governed(&known), input).map(|o| o.mutation);
    let input = Input {
        operation,
        namespace,
        object,
    };
    let Ok(first) = mutate(&input) else {
        // A malformed object may be refused; it must not panic.
        return Ok(());
    };
    if first.is_empty() {
        return Ok(());
    }
    if namespace != corpus::GOVERNED {
        return Err(format!(
            "patched an object in ungoverned namespace {namespace}"
        ));
    }
    if !matches!(operation, Operation::Create | Operation::Update) {
        return Err(format!("patched on {operation:?}"));
    }
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &first.patch)
        .map_err(|e| format!("patch does not apply: {e}; patch {:?}", first.patch))?;
    let again = Input {
        operation: Operation::Update,
        namespace,
        object: &patched,
    };
    match mutate(&again) {
        Ok(second) if second.is_empty() => Ok(()),
        Ok(second) => Err(format!(
            "not idempotent: second admission patches {:?}",
            second.patch
        )),
        Err(e) => Err(format!("the engine refuses its own result: {e}")),
    }
}

fn mutated_object(bytes: &[u8]) -> arbitrary::Result<(Value, Operation, &'static str)> {
    let mut u = Unstructured::new(bytes);
    let (_, base) = u.choose(&OBJECTS)?;
    let object = fuzzgen::mutate(&mut u, base, "")?;
    let operation = *u.choose(&OPERATIONS)?;
    let namespace = if u.ratio(7, 8)? {
        corpus::GOVERNED
    } else {
        corpus::UNGOVERNED
    };
    Ok((object, operation, namespace))
}

#[test]
fn every_unmodified_knative_object_is_patched_cleanly_and_idempotently() {
    let mut patched = 0;
    for (label, object) in OBJECTS.iter() {
        check(corpus::GOVERNED, Operation::Create, object)
            .unwrap_or_else(|e| panic!("{label}: {e}"));
        let input = Input {
            operation: Operation::Create,
            namespace: corpus::GOVERNED,
            object,
        };
        if !engine::outcome(
            engine::Answering::Governed(&support::corpus::governing(&POLICY)),
            &input,
        )
        .map(|o| o.mutation)
        .unwrap()
        .is_empty()
        {
            patched += 1;
        }
    }
    // The property runs below are only meaningful if real objects get
    // patches (with examples/policy.yaml: autoscaler, controller and
    // net-kourier-controller, both HPAs, both PDBs, config-leader-election).
    assert!(patched >= 8, "only {patched} Knative objects got a patch");
}

#[test]
fn check_reports_a_patch_outside_the_governed_namespace() {
    // The oracle must be able to fail: a policy that governs `default`
    // patches the controller there, and `check` must call that out.
    let moved = corpus::in_namespace(&corpus::controller_deployment(), corpus::UNGOVERNED);
    let mut policy = POLICY.clone();
    policy.spec.target_namespace = corpus::UNGOVERNED.to_string();
    let err = check_with(&policy, corpus::UNGOVERNED, Operation::Create, &moved).unwrap_err();
    assert!(err.contains("ungoverned namespace default"), "{err}");
}

#[test]
fn mutated_objects_reach_patches_refusals_and_no_ops() {
    // The generator must exercise every branch, not just bounce off a parse
    // error: over 500 deterministic inputs, count the outcomes.
    let (mut patched, mut refused, mut untouched) = (0, 0, 0);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for _ in 0..500 {
        let bytes: Vec<u8> = (0..256)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        let Ok((object, operation, namespace)) = mutated_object(&bytes) else {
            continue;
        };
        check(namespace, operation, &object).unwrap_or_else(|e| panic!("{e}\nobject: {object}"));
        let input = Input {
            operation,
            namespace,
            object: &object,
        };
        match engine::outcome(
            engine::Answering::Governed(&support::corpus::governing(&POLICY)),
            &input,
        )
        .map(|o| o.mutation)
        {
            Ok(m) if m.is_empty() => untouched += 1,
            Ok(_) => patched += 1,
            Err(_) => refused += 1,
        }
    }
    assert!(patched > 50, "patched {patched}");
    assert!(refused > 0, "refused {refused}");
    assert!(untouched > 50, "untouched {untouched}");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn mutated_knative_objects_never_break_the_engine(bytes in proptest::collection::vec(any::<u8>(), 16..512)) {
        if let Ok((object, operation, namespace)) = mutated_object(&bytes)
            && let Err(e) = check(namespace, operation, &object)
        {
            return Err(TestCaseError::fail(format!("{e}\nobject: {object}")));
        }
    }

    #[test]
    fn arbitrary_json_never_breaks_the_engine(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let mut u = Unstructured::new(&bytes);
        if let Ok(object) = fuzzgen::json(&mut u, 4) {
            for operation in OPERATIONS {
                if let Err(e) = check(corpus::GOVERNED, operation, &object) {
                    return Err(TestCaseError::fail(format!("{e}\nobject: {object}")));
                }
            }
        }
    }
}
