//! The built binary: SIGTERM drain with a request in flight, and start-up
//! errors that must exit non-zero with a clear message.

use crate::support;
use crate::support::tls;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use support::corpus::review;
use support::*;
use tls::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn localhost_client(ca_pem: &str, addr: SocketAddr) -> reqwest::Client {
    knative_ha_webhook::tls::install_crypto_provider();
    reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap())
        .resolve("localhost", addr)
        .http1_only()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_in_flight_requests_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let ca_out = dir.path().join("ca.pem");
    let mut p = spawn_serve(dir.path(), "2s", "json");
    let (addr, metrics) = p.addresses();
    let ca_pem = std::fs::read_to_string(&ca_out).unwrap();
    assert!(
        becomes_true(Duration::from_secs(20), || async move {
            get_status(metrics, "/readyz").await.0 == 200
        })
        .await,
        "ready"
    );
    let client = localhost_client(&ca_pem, addr);
    let controller = fixture("Deployment", "knative-serving", "controller");
    let body =
        serde_json::to_vec(&review("before", "CREATE", "knative-serving", &controller)).unwrap();
    let url = format!("https://localhost:{}/mutate", addr.port());
    let resp = client.post(&url).body(body.clone()).send().await.unwrap();
    assert_eq!(resp.status(), 200);

    // A request in flight: headers and half of the body sent, the rest later.
    let mut roots = rustls::RootCertStore::empty();
    for c in knative_ha_webhook::tls::parse_chain(ca_pem.as_bytes(), &ca_out).unwrap() {
        roots.add(c).unwrap();
    }
    let tls_config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls_config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut slow = connector
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .unwrap();
    let in_flight = serde_json::to_vec(&review(
        "in-flight",
        "CREATE",
        "knative-serving",
        &controller,
    ))
    .unwrap();
    let head = format!(
        "POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        in_flight.len()
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    let half = in_flight.len() / 2;
    slow.write_all(&in_flight[..half]).await.unwrap();
    slow.flush().await.unwrap();

    let pid = p.child.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());

    // Readiness fails at once ...
    assert!(
        becomes_true(Duration::from_secs(10), || async move {
            get_status(metrics, "/readyz").await.0 == 503
        })
        .await,
        "/readyz fails after SIGTERM"
    );
    // ... while /mutate still answers during the shutdown delay, on the
    // kept-alive connection and on a new one.
    let resp = client.post(&url).body(body.clone()).send().await.unwrap();
    assert_eq!(resp.status(), 200, "served during the delay (kept-alive)");
    assert_eq!(
        resp.headers()
            .get("connection")
            .map(|v| v.to_str().unwrap()),
        Some("close"),
        "HTTP/1.1 clients are told to move to a new connection"
    );
    let fresh = localhost_client(&ca_pem, addr);
    let resp = fresh.post(&url).body(body.clone()).send().await.unwrap();
    assert_eq!(
        resp.status(),
        200,
        "served during the delay (new connection)"
    );

    // After the delay the listener closes ...
    assert!(
        becomes_true(Duration::from_secs(20), || async move {
            tokio::net::TcpStream::connect(addr).await.is_err()
        })
        .await,
        "listener closed after the delay"
    );
    // ... but the in-flight request still completes.
    slow.write_all(&in_flight[half..]).await.unwrap();
    slow.flush().await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), slow.read_to_end(&mut answer))
        .await
        .expect("in-flight answer in time")
        .ok();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("\"uid\":\"in-flight\""), "{answer}");

    let status = p.wait_exit(Duration::from_secs(40));
    assert_eq!(status.code(), Some(0), "exit code");

    // One JSON log line per review, with the fields operators filter on.
    let lines: Vec<Value> =
        std::iter::from_fn(|| p.lines.recv_timeout(Duration::from_secs(5)).ok())
            .filter_map(|l| serde_json::from_str(&l).ok())
            .collect();
    let reviews: Vec<&Value> = lines.iter().filter(|v| v["message"] == "review").collect();
    assert_eq!(
        reviews.len(),
        4,
        "before, 2 during the delay, in-flight: {lines:?}"
    );
    let line = reviews
        .iter()
        .find(|v| v["uid"] == "in-flight")
        .expect("in-flight logged");
    assert_eq!(line["kind"], "Deployment");
    assert_eq!(line["namespace"], "knative-serving");
    assert_eq!(line["name"], "controller");
    assert_eq!(line["operation"], "CREATE");
    assert_eq!(line["outcome"], "patched");
    assert!(line["patch_ops"].as_u64().unwrap() >= 1, "{line}");
    assert!(line["duration_ms"].as_f64().is_some(), "{line}");
    // What changed and why, as the client's warnings say it (CI and GitOps tools drop warnings).
    let changes = line["changes"].as_str().unwrap_or_default();
    assert!(
        changes.contains("deployment/controller: spec.replicas unset -> 3 (policy serving)"),
        "{line}"
    );
}

#[test]
fn sigint_and_sigterm_with_zero_delay_exit_zero() {
    for signal in ["-INT", "-TERM"] {
        let dir = tempfile::tempdir().unwrap();
        let mut p = spawn_serve(dir.path(), "0s", "json");
        p.addresses();
        p.signal(signal);
        let status = p.wait_exit(Duration::from_secs(30));
        assert_eq!(status.code(), Some(0), "{signal}");
    }
}

#[test]
fn start_up_errors_exit_non_zero_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let bad_policy = dir.path().join("bad-policy.yaml");
    std::fs::write(&bad_policy, "spec: {targetNamespace: x, bogus: 1}").unwrap();
    let ca = dir.path().join("ca.pem");
    let ca = ca.to_str().unwrap();
    let kubeconfig = dir.path().join("no-such-kubeconfig");
    let policy = example_policy_path();
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        (
            "invalid policy file",
            vec![
                "serve",
                "--policy-file",
                bad_policy.to_str().unwrap(),
                "--self-signed",
                ca,
            ],
            "bad-policy.yaml",
        ),
        (
            "missing policy file",
            vec![
                "serve",
                "--policy-file",
                "/nonexistent/policy.yaml",
                "--self-signed",
                ca,
            ],
            "/nonexistent/policy.yaml",
        ),
        (
            "no certificate",
            vec!["serve", "--policy-file", policy.to_str().unwrap()],
            "--self-signed",
        ),
        (
            "no cluster configuration",
            vec![
                "serve",
                "--namespace",
                "knative-ha",
                "--self-signed",
                ca,
                "--listen",
                "127.0.0.1:0",
                "--metrics-listen",
                "127.0.0.1:0",
            ],
            "finding the Kubernetes cluster: policies are read from the cluster (no --policy-file)",
        ),
        (
            "bad shutdown delay",
            vec![
                "serve",
                "--policy-file",
                policy.to_str().unwrap(),
                "--self-signed",
                ca,
                "--shutdown-delay",
                "10",
            ],
            "missing unit",
        ),
    ];
    for (name, args, want) in cases {
        let out = bin()
            .args(&args)
            .env("KUBECONFIG", &kubeconfig)
            .env("HOME", dir.path())
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .env_remove("KHW_POLICY_FILE")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{name}: must fail");
        assert!(
            stderr.contains(want),
            "{name}: stderr lacks {want:?}:\n{stderr}"
        );
    }
}
