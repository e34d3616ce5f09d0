//! knative-ha-webhook: a mutating admission webhook that makes the Knative
//! Serving control plane highly available.
//!
//! Dependencies point one way:
//! `policy` (model + validation) <- `engine` (pure mutation) <- `store`
//! (snapshot the request path reads) <- `sources` (file / cluster watchers)
//! and `admission` (wire protocol) <- `server` (HTTPS, probes, metrics) and
//! `reconcile` <- `config` (flags and environment, parsed purely) <- `cmd`
//! (one function per subcommand) <- `cli`.
#![forbid(unsafe_code)]

pub mod admission;
pub mod cli;
pub mod cmd;
pub mod config;
pub mod engine;
pub mod errors;
pub mod kubeclient;
pub mod manifest;
pub mod policy;
pub mod reconcile;
pub mod scope;
pub mod server;
pub mod sources;
pub mod store;
pub mod telemetry;
pub mod tls;
pub mod tools;
pub mod yaml;
