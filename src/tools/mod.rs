//! What the command-line tools compute beside the server: `check`'s
//! verdicts on policy files, `preview`'s patches of manifests offline, and
//! how an audit report is shown (the table and the exit code). `cmd` runs
//! them; the server never does.

pub mod audit_table;
pub mod check;
pub mod preview;
