//! Command line: a thin dispatcher. Each subcommand's arguments live in the
//! module that implements it.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "knative-ha-webhook",
    version,
    about = "Mutating admission webhook that makes Knative Serving's control plane highly available"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Show what a policy does to a set of manifests (offline).
    Preview(crate::preview::PreviewArgs),
    /// Validate policy files (policies or policy ConfigMaps): exit 0 when
    /// all are valid, 1 with every error otherwise.
    Check(crate::check::CheckArgs),
    /// Print the HighAvailabilityPolicy CustomResourceDefinition.
    Crd(crate::preview::CrdArgs),
    /// Run the HTTPS admission server.
    Serve(Box<crate::server::ServeArgs>),
    /// Report, per governed object, what differs from the policy: exit 0 when
    /// everything is in line, 1 when drift exists, 2 on errors.
    Audit(crate::reconcile::audit::AuditArgs),
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Preview(args) => crate::preview::run_preview(&args),
        Command::Check(args) => crate::check::run_check(&args),
        Command::Crd(args) => crate::preview::run_crd(&args),
        Command::Serve(args) => crate::server::run_cli(*args),
        Command::Audit(args) => return crate::reconcile::audit::run_cli(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
