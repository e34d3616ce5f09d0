//! The subcommands, each a small function over the library.
//!
//! One convention: `anyhow::Result<ExitCode>`. `Ok` carries the exit
//! status, including the outcomes a command reports itself (`check`: 1 when
//! a file is invalid; `audit`: 1 on drift, 2 on errors); `Err` is any other
//! failure, which [`crate::cli::main`] prints as `error: ...` with its
//! causes and exits with 1.

mod audit;
mod preview;
mod report;
mod restore;
mod serve;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::config::{CommandConfig, CrdFormat};
use crate::tools::check::Line;

/// Runs the configured command.
pub fn run(config: CommandConfig) -> anyhow::Result<ExitCode> {
    match config {
        CommandConfig::Preview(args) => preview::preview(&args),
        CommandConfig::Check(args) => Ok(check(&args.files)),
        CommandConfig::Crd(args) => crd(args.output),
        CommandConfig::Serve(config) => serve::serve(*config),
        CommandConfig::Audit { args, kube } => Ok(audit::audit(&args, &kube)),
        CommandConfig::Restore { args, kube } => restore::restore(&args, &kube),
    }
}

/// `check FILE...`: prints every valid document (stdout), every warning
/// and every error (stderr); exit 1 when there is an error.
fn check(files: &[PathBuf]) -> ExitCode {
    let mut failed = false;
    for line in crate::tools::check::check_files(files) {
        match line {
            Line::Valid(valid) => println!("{valid}"),
            Line::Warning(warning) => eprintln!("{warning}"),
            Line::Error(error) => {
                eprintln!("{error}");
                failed = true;
            }
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// `crd`: prints the CustomResourceDefinition.
fn crd(format: CrdFormat) -> anyhow::Result<ExitCode> {
    let text = match format {
        CrdFormat::Yaml => crate::tools::preview::crd_yaml()?,
        CrdFormat::Json => serde_json::to_string_pretty(&crate::policy::crd_value())? + "\n",
    };
    write_stdout(&text)?;
    Ok(ExitCode::SUCCESS)
}

/// Writes `text` to standard output; a failed write (a closed pipe) is an
/// error, not a panic as with `print!`.
fn write_stdout(text: &str) -> std::io::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()
}
