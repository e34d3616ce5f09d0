//! The binary's entry: parse the command line, build the configuration
//! from it and the process environment ([`crate::config`]), run the
//! command ([`crate::cmd`]).

use std::process::ExitCode;

use clap::Parser;

use crate::config::{self, Cli, ProcessEnv};
use crate::errors::Chain;

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = config::parse(cli, &ProcessEnv)
        .map_err(anyhow::Error::from)
        .and_then(crate::cmd::run);
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {}", Chain(err.as_ref()));
            ExitCode::FAILURE
        }
    }
}
