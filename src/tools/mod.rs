//! What the command-line tools compute beside the server (`check`'s
//! verdicts, `preview`'s patches, the audit table); `cmd` runs them.

pub mod audit_table;
pub mod check;
pub mod preview;
