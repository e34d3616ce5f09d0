//! The one test-support layer of the integration tests, benches and fuzz
//! targets. `mod support;` in a test file brings the light part, which every
//! test may use:
//!
//! - [`corpus`]: the Knative v1.23.0 fixtures and `examples/policy.yaml`
//!   (the one fixture loader), the kind -> group/version/resource table and
//!   the one AdmissionReview builder;
//! - [`wait`]: the one bounded poll loop;
//! - [`rfc6902`]: an independent JSON patch applier;
//! - [`cli`]: the built binary, its output and a server process's stderr.
//!
//! The heavy parts are pulled only by the tests that need them, with
//! `#[path]` (each `tests/*.rs` is its own crate, and a module compiled into
//! every test binary costs build time):
//!
//! - `#[path = "support/router.rs"] mod router;`: `POST /mutate` through
//!   the router in process (`oneshot`), for the admission content;
//! - `#[path = "support/tls.rs"] mod tls;`: PKI, Secret volume, HTTPS
//!   clients, an in-process server (TLS, limits, rotation, shutdown);
//! - `#[path = "support/fakeapi/mod.rs"] mod fakeapi;`: the fake API server,
//!   and `#[path = "support/cluster.rs"] mod cluster_harness;`: the cluster
//!   source running against it;
//! - `#[path = "support/fuzzgen.rs"] mod fuzzgen;` and `oracle.rs`: input
//!   generators and reply properties (robustness tests, fuzz targets).
//!
//! `benches/engine.rs` and `fuzz/src/lib.rs` pull `corpus.rs` (and
//! `fuzzgen.rs`, `oracle.rs`) the same way; those files depend on nothing
//! else here.
#![allow(dead_code)]
// The re-exports below are what a test may use; each test uses some.
#![allow(unused_imports)]

pub mod cli;
pub mod corpus;
pub mod rfc6902;
pub mod wait;

use std::path::PathBuf;

use knative_ha_webhook::engine::{self, Context, Input, Operation};
use knative_ha_webhook::policy::Policy;
use serde_json::Value;

pub use cli::{Proc, bin, run, run_stdin, spawn_logged, spawn_serve, stderr, stdout};
pub use corpus::{FIXTURES, fixture, fixture_objects};
pub use rfc6902::apply_rfc6902;
pub use wait::{becomes_true, wait_until};

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
    let m = engine::mutate(policy, &input, &Context::default())
        .unwrap_or_else(|e| panic!("{}: {e}", corpus::label(object)));
    apply_rfc6902(object, &serde_json::to_value(&m.patch).unwrap()).expect("the patch applies")
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
