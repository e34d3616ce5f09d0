//! The HTTPS admission server.

use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Policy file (YAML); re-read when it changes.
    #[arg(long, env = "KHW_POLICY_FILE")]
    pub policy_file: Option<std::path::PathBuf>,
}

pub fn run_cli(_args: ServeArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("serve: not implemented yet")
}
