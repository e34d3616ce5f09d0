//! The built binary (issue 13 point 12, issue 12 point 5): a second signal
//! during the shutdown delay exits at once; text logs carry no colour codes
//! when stderr is not a terminal, and request content in them is escaped.

mod support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::corpus::review;
use support::*;

const BIN: &str = env!("CARGO_BIN_EXE_knative-ha-webhook");

struct Proc {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(dir: &std::path::Path, format: &str, delay: &str) -> Proc {
    let policy = example_policy_path();
    let mut child = Command::new(BIN)
        .args(["serve", "--policy-file", policy.to_str().unwrap()])
        .args(["--self-signed", dir.join("ca.pem").to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
        .args(["--shutdown-delay", delay, "--log-format", format])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).split(b'\n').map_while(Result::ok) {
            if tx
                .send(String::from_utf8_lossy(&line).into_owned())
                .is_err()
            {
                break;
            }
        }
    });
    Proc {
        child,
        lines: rx,
        seen: Vec::new(),
    }
}

impl Proc {
    /// Waits (bounded) for a log line containing `needle`; returns it.
    fn wait_line(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(line) = self.lines.recv_timeout(Duration::from_millis(200)) {
                self.seen.push(line.clone());
                if line.contains(needle) {
                    return line;
                }
            }
        }
        panic!(
            "no log line with {needle:?}; got:\n{}",
            self.seen.join("\n")
        );
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args([sig, &pid])
                .status()
                .unwrap()
                .success()
        );
    }

    fn wait_exit(&mut self, limit: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "process did not exit in time");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Every remaining log line (after exit).
    fn rest(&mut self) -> Vec<String> {
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(2)) {
            self.seen.push(line);
        }
        self.seen.clone()
    }
}

/// The value after `key=` in a text log line (escape codes removed).
fn text_field(line: &str, key: &str) -> String {
    let plain: String = strip_ansi(line);
    let at = plain.find(&format!("{key}=")).expect(key) + key.len() + 1;
    plain[at..].split_whitespace().next().unwrap().to_string()
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[test]
fn a_second_signal_during_the_shutdown_delay_exits_at_once_with_130() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = spawn(dir.path(), "json", "60s");
    p.wait_line("serving POST /mutate over HTTPS");
    p.signal("-INT");
    p.wait_line("received SIGINT");
    p.signal("-INT");
    // The delay is 60 s: only the second signal can end it within the bound.
    let status = p.wait_exit(Duration::from_secs(20));
    assert_eq!(status.code(), Some(130));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_logs_have_no_colour_codes_in_a_pipe_and_escape_request_content() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = spawn(dir.path(), "text", "0s");
    let line = p.wait_line("serving POST /mutate over HTTPS");
    let addr: SocketAddr = text_field(&line, "listen").parse().unwrap();
    let ca = std::fs::read_to_string(dir.path().join("ca.pem")).unwrap();
    knative_ha_webhook::tls::install_crypto_provider();
    let client = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .resolve("localhost", addr)
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let controller = fixture("Deployment", "knative-serving", "controller");
    let forged = "u-1\nFORGED level=ERROR \u{1b}[31mred";
    let body = review(forged, "CREATE", "knative-serving", &controller);
    let resp = client
        .post(format!("https://localhost:{}/mutate", addr.port()))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    p.wait_line("review");
    p.signal("-TERM");
    assert_eq!(p.wait_exit(Duration::from_secs(30)).code(), Some(0));
    let lines = p.rest();
    assert!(
        lines.iter().all(|l| !l.contains('\u{1b}')),
        "escape codes in a piped text log:\n{}",
        lines.join("\n")
    );
    assert!(
        lines.iter().all(|l| !l.starts_with("FORGED")),
        "a request value started a log line:\n{}",
        lines.join("\n")
    );
    assert!(
        lines.iter().any(|l| l.contains(r"u-1\u{a}FORGED")),
        "the uid is logged, escaped:\n{}",
        lines.join("\n")
    );
}
