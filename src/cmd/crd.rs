//! `knative-ha-webhook crd`.

use std::io::Write;
use std::process::ExitCode;

use crate::config::{CrdArgs, CrdFormat};

/// Prints the CustomResourceDefinition.
pub fn crd(args: &CrdArgs) -> anyhow::Result<ExitCode> {
    let text = match args.output {
        CrdFormat::Yaml => crate::tools::preview::crd_yaml()?,
        CrdFormat::Json => serde_json::to_string_pretty(&crate::policy::crd_value())? + "\n",
    };
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(text.as_bytes())?;
    stdout.flush()?;
    Ok(ExitCode::SUCCESS)
}
