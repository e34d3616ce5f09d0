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

/// Runs `work`, the cluster part of `command`, on a current-thread runtime
/// and prints its report as `format` asks (`table` writes the table),
/// exiting with the report's `code`; or prints the error (`error: ...`
/// with its causes) and exits with 2.
pub fn run<R: Serialize, E: Error + Send + Sync + 'static>(
    command: &'static str,
    work: impl Future<Output = Result<R, E>>,
    format: AuditFormat,
    table: impl FnOnce(&R) -> String,
    code: impl FnOnce(&R) -> u8,
) -> ExitCode {
    crate::tls::install_crypto_provider();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(ReportError::Runtime);
    let rendered = runtime.and_then(|runtime| {
        let report = runtime.block_on(work).map_err(|e| ReportError::Command {
            command,
            source: Box::new(e),
        })?;
        let text = match format {
            AuditFormat::Table => table(&report),
            AuditFormat::Json => serde_json::to_string_pretty(&report)
                .map(|s| s + "\n")
                .map_err(|e| ReportError::Encode(e.into()))?,
            AuditFormat::Yaml => crate::tools::preview::to_yaml(&report)
                .map_err(|e| ReportError::Encode(e.into()))?,
        };
        Ok((text, code(&report)))
    });
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
