//! The binary's entry: parse the command line, build the configuration
//! from it and the process environment ([`crate::config`]), run the
//! command ([`crate::cmd`]).

use std::process::ExitCode;

use clap::Parser;

use crate::config::{self, Cli, ProcessEnv};

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = config::parse(cli, &ProcessEnv)
        .map_err(anyhow::Error::from)
        .and_then(crate::cmd::run);
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {}", with_causes(&err));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes, `: `-separated, leaving out a cause whose
/// text is already there (kube's errors repeat their causes in their own
/// messages).
fn with_causes(error: &anyhow::Error) -> String {
    let mut text = error.to_string();
    for cause in error.chain().skip(1) {
        let cause = cause.to_string();
        if !text.contains(&cause) {
            text.push_str(": ");
            text.push_str(&cause);
        }
    }
    text
}
