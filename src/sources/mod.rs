//! Policy sources: they build [`crate::engine::Snapshot`]s and publish them
//! to a [`crate::store::PolicyStore`].
//!
//! - `file`: a policy file, re-read when it changes (`serve --policy-file`).
//! - `cluster`: HighAvailabilityPolicy resources and labelled ConfigMaps,
//!   watched through the API server (`serve` without `--policy-file`).
//!
//! Every source respects [`crate::scope::AllowedNamespaces`]
//! (`serve --governed-namespaces`).

pub mod cluster;
pub mod file;
