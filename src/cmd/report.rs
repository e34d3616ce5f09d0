//! What `audit` and `restore` against a cluster share: the work run on a
//! current-thread runtime, the report rendered, and the report or the
//! error printed (then exit 2).

use std::error::Error;
use std::process::ExitCode;

use serde::Serialize;

use crate::config::AuditFormat;
use crate::errors::Chain;

/// Why `audit` or `restore` printed no report (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("starting the runtime")]
    Runtime(#[source] std::io::Error),
    /// The command's own failure, named by the command.
    #[error("{command}")]
    Command {
        command: &'static str,
        #[source]
        source: Box<dyn Error + Send + Sync>,
    },
    #[error("encoding the report")]
    Encode(#[source] Box<dyn Error + Send + Sync>),
}

/// Runs `work`, the cluster part of `command`, on a current-thread runtime.
pub fn block_on<T, E>(
    command: &'static str,
    work: impl Future<Output = Result<T, E>>,
) -> Result<T, ReportError>
where
    E: Error + Send + Sync + 'static,
{
    crate::tls::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ReportError::Runtime)?;
    runtime.block_on(work).map_err(|e| ReportError::Command {
        command,
        source: Box::new(e),
    })
}

/// `report` as `format` asks: `table` writes the table.
pub fn render<R: Serialize>(
    report: &R,
    format: AuditFormat,
    table: impl FnOnce(&R) -> String,
) -> Result<String, ReportError> {
    match format {
        AuditFormat::Table => Ok(table(report)),
        AuditFormat::Json => serde_json::to_string_pretty(report)
            .map(|s| s + "\n")
            .map_err(|e| ReportError::Encode(e.into())),
        AuditFormat::Yaml => {
            crate::tools::preview::to_yaml(report).map_err(|e| ReportError::Encode(e.into()))
        }
    }
}

/// Prints the rendered report and exits with its code, or prints the
/// error (`error: ...` with its causes) and exits with 2.
pub fn print(rendered: Result<(String, u8), ReportError>) -> ExitCode {
    match rendered {
        Ok((text, code)) => {
            print!("{text}");
            ExitCode::from(code)
        }
        Err(e) => {
            eprintln!("error: {}", Chain(&e));
            ExitCode::from(2)
        }
    }
}
