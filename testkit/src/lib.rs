//! What the integration tests (`tests/it`), the engine benchmark
//! (`benches/engine.rs`), the fuzz targets (`fuzz/`) and
//! `examples/fakeapi_bench.rs` share, each module once:
//!
//! - [`corpus`]: the Knative v1.23.0 fixtures and `examples/policy.yaml`
//!   (the one fixture loader), the kind -> group/version/resource table and
//!   the one AdmissionReview builder;
//! - [`fuzzgen`]: input generators (fuzz targets and robustness tests);
//! - [`oracle`]: the properties every answer of `admission::review` has;
//! - [`fakeapi`]: the fake Kubernetes API server.
//!
//! The helpers only the tests use live in `tests/it/support`, which
//! re-exports these modules.

pub mod corpus;
pub mod fakeapi;
pub mod fuzzgen;
pub mod oracle;
