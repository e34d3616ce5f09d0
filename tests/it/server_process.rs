//! The built binary: a second signal
//! during the shutdown delay exits at once; text logs carry no colour codes
//! when stderr is not a terminal, and request content in them is escaped.

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use support::corpus::review;
use support::*;

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
    let mut p = spawn_serve(dir.path(), "60s", "json");
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
    let mut p = spawn_serve(dir.path(), "0s", "text");
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
