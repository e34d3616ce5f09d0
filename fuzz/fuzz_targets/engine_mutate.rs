//! Real Knative objects with fields replaced/removed/retyped/added, and
//! arbitrary JSON, into `engine::outcome`: never a panic; a patch applies to
//! the object, a second admission of the result yields no patch, and no
//! patch outside the governed namespace or for DELETE/CONNECT.
#![no_main]

use std::sync::LazyLock;

use arbitrary::Unstructured;
use knative_ha_webhook::engine::{self, Answering, Input, Operation, Snapshot};
use knative_ha_webhook::policy::Policy;
use knative_ha_webhook_fuzz::{corpus, fuzzgen};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

static POLICY: LazyLock<Policy> =
    LazyLock::new(|| Policy::from_yaml(corpus::POLICY_YAML).expect("examples/policy.yaml"));
static OBJECTS: LazyLock<Vec<(String, Value)>> = LazyLock::new(corpus::governed_objects);
static SNAPSHOT: LazyLock<Snapshot> = LazyLock::new(|| corpus::governing(&POLICY));
const OPERATIONS: [Operation; 4] = [
    Operation::Create,
    Operation::Update,
    Operation::Delete,
    Operation::Connect,
];

fn input(data: &[u8]) -> arbitrary::Result<(Value, Operation, &'static str)> {
    let mut u = Unstructured::new(data);
    let object = if u.ratio(1, 5)? {
        fuzzgen::json(&mut u, 5)?
    } else {
        let (_, base) = u.choose(&OBJECTS)?;
        fuzzgen::mutate(&mut u, base, "")?
    };
    let operation = *u.choose(&OPERATIONS)?;
    let namespace = if u.ratio(7, 8)? {
        corpus::GOVERNED
    } else {
        corpus::UNGOVERNED
    };
    Ok((object, operation, namespace))
}

fuzz_target!(|data: &[u8]| {
    let Ok((object, operation, namespace)) = input(data) else {
        return;
    };
    let first = Input {
        operation,
        namespace,
        object: &object,
    };
    let Ok(mutation) = engine::outcome(Answering::Governed(&SNAPSHOT), &first).map(|o| o.mutation) else {
        return;
    };
    if mutation.is_empty() {
        return;
    }
    assert_eq!(
        namespace,
        corpus::GOVERNED,
        "patched outside the governed namespace"
    );
    assert!(
        matches!(operation, Operation::Create | Operation::Update),
        "patched on {operation:?}"
    );
    let mut patched = object.clone();
    json_patch::patch(&mut patched, &mutation.patch).expect("the engine's patch applies");
    let again = Input {
        operation: Operation::Update,
        namespace,
        object: &patched,
    };
    let second =
        engine::outcome(Answering::Governed(&SNAPSHOT), &again).map(|o| o.mutation).expect("the engine accepts its own result");
    assert!(second.is_empty(), "not idempotent: {:?}", second.patch);
});
