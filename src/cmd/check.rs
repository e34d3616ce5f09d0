//! `knative-ha-webhook check FILE...`.

use std::process::ExitCode;

use crate::config::CheckArgs;
use crate::tools::check::Line;

/// Prints every valid document (stdout), every warning and every error
/// (stderr); exit 1 when there is an error.
pub fn check(args: &CheckArgs) -> anyhow::Result<ExitCode> {
    let mut failed = false;
    for line in crate::tools::check::check_files(&args.files) {
        match line {
            Line::Valid(valid) => println!("{valid}"),
            Line::Warning(warning) => eprintln!("{warning}"),
            Line::Error(error) => {
                eprintln!("{error}");
                failed = true;
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
