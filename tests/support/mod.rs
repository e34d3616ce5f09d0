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

use knative_ha_webhook::policy::Policy;

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
