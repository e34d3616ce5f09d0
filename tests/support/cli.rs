//! The built binary, run from the repository root (CLI and process tests).

use std::io::Write;
use std::process::{Command, Output, Stdio};

/// The built binary, run from the repository root.
pub fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_knative-ha-webhook"));
    c.current_dir(env!("CARGO_MANIFEST_DIR"));
    c
}

pub fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("binary runs")
}

pub fn run_stdin(args: &[&str], input: &str) -> Output {
    let mut child = bin()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("binary runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}
pub fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}
