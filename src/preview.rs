//! Offline commands: `preview`, `check` and `crd`.

use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct PreviewArgs {
    /// Policy file (YAML).
    #[arg(long)]
    pub policy: PathBuf,
    /// Manifests (multi-document YAML); stdin when none or `-`.
    pub manifests: Vec<PathBuf>,
}

#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// Policy file to validate.
    pub policy: PathBuf,
}

pub fn run_preview(_args: &PreviewArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("preview: not implemented yet")
}

pub fn run_check(_args: &CheckArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("check: not implemented yet")
}

pub fn run_crd() -> anyhow::Result<ExitCode> {
    anyhow::bail!("crd: not implemented yet")
}
