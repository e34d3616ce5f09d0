//! The one test-support layer of the integration tests (`tests/it`, one
//! crate): every helper is defined here once.
//!
//! - [`corpus`]: the Knative v1.23.0 fixtures and `examples/policy.yaml`
//!   (the one fixture loader), the kind -> group/version/resource table and
//!   the one AdmissionReview builder;
//! - [`wait`]: the one bounded poll loop;
//! - [`rfc6902`]: an independent JSON patch applier;
//! - [`cli`]: the built binary, its output and a server process's stderr;
//! - [`router`]: `POST /mutate` through the router in process (`oneshot`),
//!   for the admission content;
//! - [`tls`]: PKI, Secret volume, HTTPS clients, an in-process server (TLS,
//!   limits, rotation, shutdown);
//! - [`fakeapi`]: the fake API server, and [`cluster`]: the cluster source
//!   running against it;
//! - [`fuzzgen`] and [`oracle`]: input generators and reply properties
//!   (robustness tests, fuzz targets);
//! - [`policygen`]: the one generator of random valid policies for the
//!   property tests, shaped by each test's `Shape`.
//!
//! `corpus`, `fuzzgen`, `oracle` and `fakeapi` live in the `testkit` crate
//! (`testkit/`), which the engine benchmark, the fuzz targets and
//! `examples/fakeapi_bench.rs` use too; they are re-exported here.
#![allow(dead_code)]
// The re-exports below are what a test may use; each test uses some.
#![allow(unused_imports)]

pub mod cli;
pub mod cluster;
pub mod policygen;
pub mod rfc6902;
pub mod router;
pub mod tls;
pub mod wait;

pub use testkit::{corpus, fakeapi, fuzzgen, oracle};

use std::path::PathBuf;

use knative_ha_webhook::engine::{self, Input, Operation};
use knative_ha_webhook::policy::Policy;
use serde_json::Value;

pub use cli::{Proc, bin, run, run_stdin, spawn_logged, spawn_serve, stderr, stdout};
pub use corpus::{FIXTURES, fixture, fixture_objects};
pub use rfc6902::apply_rfc6902;
pub use wait::{becomes_true, wait_until, wait_until_within};

/// A path in the repository.
pub fn repo_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// The example policy shipped in the repository.
pub fn example_policy_path() -> PathBuf {
    repo_path("examples/policy.yaml")
}

/// The policy in the file `rel` (repository-relative).
pub fn load_policy(rel: &str) -> Policy {
    let text = std::fs::read_to_string(repo_path(rel)).expect("policy readable");
    Policy::from_yaml(&text).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// A policy `p` for `knative-serving` ([`corpus::GOVERNED`]) whose spec is
/// `spec` (YAML lines indented by two spaces).
pub fn serving_policy(spec: &str) -> Policy {
    let text = format!(
        "apiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\nmetadata: {{name: p}}\nspec:\n  targetNamespace: {}\n{spec}",
        corpus::GOVERNED
    );
    Policy::from_yaml(&text).unwrap_or_else(|e| panic!("{spec}: {e}"))
}

/// The object after the engine's patch (CREATE in [`corpus::GOVERNED`], as
/// `kubectl apply` sends it), applied with the independent applier.
pub fn mutated(policy: &Policy, object: &Value) -> Value {
    let input = Input {
        operation: Operation::Create,
        namespace: corpus::GOVERNED,
        object,
    };
    let m = engine::outcome(
        engine::Answering::Governed(&engine::Snapshot::from_policies([Policy::clone(policy)])),
        &input,
    )
    .map(|o| o.mutation)
    .unwrap_or_else(|e| panic!("{}: {e}", corpus::label(object)));
    apply_rfc6902(object, &serde_json::to_value(&m.patch).unwrap()).expect("the patch applies")
}

/// `engine::outcome` of `object` (`op` in `namespace`, under
/// [`corpus::governing`]), the patch checked against the mutated object:
/// the object after the patch and the change lines.
/// `preview` of `objects` (written out as one multi-document manifest, read
/// back as `preview` reads files) under `policy`, which governs `namespace`.
pub fn preview_objects(
    policy: &Policy,
    namespace: &str,
    objects: &[Value],
) -> Vec<knative_ha_webhook::tools::preview::Previewed> {
    use knative_ha_webhook::tools::preview;
    let manifests: Vec<String> = objects
        .iter()
        .map(|o| preview::to_yaml(o).unwrap())
        .collect();
    let docs = preview::parse_manifests("m.yaml", &manifests.join("---\n")).unwrap();
    let policies = std::iter::once((namespace.to_string(), policy.clone())).collect();
    preview::preview_documents(&policies, docs).unwrap()
}

pub fn mutate_checked(
    policy: &Policy,
    namespace: &str,
    op: Operation,
    object: &Value,
) -> (Value, Vec<String>) {
    let input = Input {
        operation: op,
        namespace,
        object,
    };
    let out = engine::outcome(
        engine::Answering::Governed(&corpus::governing(policy)),
        &input,
    )
    .expect("engine");
    let patch = serde_json::to_value(&out.mutation.patch).unwrap();
    let applied = apply_rfc6902(object, &patch).expect("patch applies");
    if let Some(o) = &out.object {
        assert_eq!(&applied, o, "patch and mutated object agree");
    }
    (applied, out.mutation.lines())
}

/// The pointers where `a` and `b` differ, with both values (for failure
/// messages).
pub fn differences(a: &Value, b: &Value) -> Vec<String> {
    fn diff(a: &Value, b: &Value, at: String, out: &mut Vec<String>) {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                for k in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
                    let (l, r) = (
                        x.get(k).unwrap_or(&Value::Null),
                        y.get(k).unwrap_or(&Value::Null),
                    );
                    diff(l, r, format!("{at}/{k}"), out);
                }
            }
            _ if a != b => out.push(format!("{at}: {a} != {b}")),
            _ => {}
        }
    }
    let mut out = Vec::new();
    diff(a, b, String::new(), &mut out);
    out
}

/// The engine's answer for `input` under `snapshot` (`None`: no policy
/// governs its namespace), with the namespace's HPA targets and
/// `config-leader-election` data, as the request path computes it.
pub fn mutate_in(
    snapshot: &knative_ha_webhook::engine::Snapshot,
    input: &Input<'_>,
) -> Result<Option<engine::Mutation>, engine::EngineError> {
    if snapshot.policy_for(input.namespace).is_none() {
        return Ok(None);
    }
    engine::outcome(engine::Answering::Governed(snapshot), input).map(|o| Some(o.mutation))
}
