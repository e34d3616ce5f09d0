//! The integration tests: one test crate (one binary to link), one module
//! per area, the helpers in [`support`].
//!
//! Run one module with a filter, e.g. `cargo test --test it engine_restore::`;
//! the ignored soak with `cargo test --test it robustness_soak:: -- --ignored`.

mod support;

mod admission_review;
mod admission_unclaimed;
mod audit_cli;
mod cli_commands;
mod cli_habits;
mod cli_policy_forms;
mod cluster_fakeapi;
mod cluster_last_valid;
mod cluster_scale;
mod cluster_serve;
mod cluster_source;
mod cluster_unclaimed;
mod cluster_watch_logs;
mod docs_tables;
mod engine_budgets;
mod engine_changes;
mod engine_fixtures;
mod engine_governed;
mod engine_knative_ha;
mod engine_leader_hash;
mod engine_lifecycle;
mod engine_properties;
mod engine_restore;
mod engine_sequences;
mod engine_undo;
mod policy_crd;
mod policy_ha_rules;
mod policy_validation;
mod reconcile_cluster;
mod reconcile_env;
mod reconcile_operator;
mod reconcile_paging;
mod reconcile_rights;
mod reconcile_serve;
mod reconcile_writes;
mod restore_cli;
mod robustness_bench_bodies;
mod robustness_engine;
mod robustness_policy;
mod robustness_review;
mod robustness_soak;
mod server_admission;
mod server_hostile;
mod server_limits;
mod server_policy_reload;
mod server_process;
mod server_shutdown;
mod server_validate;
mod tls_rotation;
mod tls_server;
