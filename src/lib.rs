//! knative-ha-webhook: a mutating admission webhook that makes the Knative
//! Serving control plane highly available.
//!
//! Dependencies point one way, down this list (a module uses only those
//! on the lines below its own; modules on one line do not use each other):
//!
//! - `cli`: the binary's entry (parse, configure, run, print the error chain)
//! - `cmd`: one function per subcommand
//! - `config`: flags and environment, parsed by one pure function
//! - `app` (the `serve` process) and `tools` (what `check`, `preview` and
//!   `audit`'s table compute)
//! - `server` (the HTTPS transport) and `reconcile` (bringing running
//!   objects in line, `audit`, `restore`)
//! - `admission` (the AdmissionReview wire protocol) and `sources` (policy
//!   file and cluster watchers that publish snapshots)
//! - `store` (where the request path reads the current snapshot) and
//!   `findings` (what the reconciler found per namespace, for the cluster
//!   source to report)
//! - `knative_operator`: the Knative Operator's settings a policy overrides
//! - `engine`: the pure mutation, snapshot + object -> patch + changes
//!   (`engine::outcome` is the one way in)
//! - `policy`: the HighAvailabilityPolicy model and its validation
//! - `knative`: Knative's components, declared once
//! - `tls`, `manifest` (Kubernetes objects from YAML files) and
//!   `kubeclient` (the one way every command builds its Kubernetes client)
//! - `yaml` (YAML input with its positions), `scope` (the namespaces the
//!   process may act in) and `errors` (how an error and a value are shown)
//! - `telemetry`: metrics and logging
#![forbid(unsafe_code)]

pub mod admission;
pub mod app;
pub mod cli;
pub mod cmd;
pub mod config;
pub mod engine;
pub mod errors;
pub mod findings;
pub mod knative;
pub mod knative_operator;
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
