//! The subcommands, each a small function over the library.
//!
//! One convention: `anyhow::Result<ExitCode>`. `Ok` carries the command's
//! exit status, including the outcomes it reports itself (`check`: 1 when a
//! file is invalid; `audit`: 1 on drift, 2 on errors, its documented
//! codes); `Err` is any other failure, which [`crate::cli::main`] prints as
//! `error: ...` with its causes and exits with 1.

mod audit;
mod check;
mod crd;
mod preview;
mod report;
mod restore;
mod serve;

use std::process::ExitCode;

use crate::config::CommandConfig;

pub use audit::audit;
pub use check::check;
pub use crd::crd;
pub use preview::preview;
pub use restore::restore;
pub use serve::serve;

/// Runs the configured command.
pub fn run(config: CommandConfig) -> anyhow::Result<ExitCode> {
    match config {
        CommandConfig::Preview(args) => preview(&args),
        CommandConfig::Check(args) => check(&args),
        CommandConfig::Crd(args) => crd(&args),
        CommandConfig::Serve(config) => serve(*config),
        CommandConfig::Audit(config) => audit(&config),
        CommandConfig::Restore(config) => restore(&config),
    }
}
