//! The policy file is re-read while serving: a valid change is applied, an
//! invalid one is counted and the previous policy stays in force.

use crate::support;
use crate::support::tls;

use std::time::Duration;

use knative_ha_webhook::app::{Config, PolicySource};
use serde_json::{Value, json};
use support::corpus::review;
use support::*;
use tls::*;

/// A review whose object makes the engine fail: answered with a warning
/// only when a policy governs `namespace`, so it shows which namespaces
/// the policy in force governs.
async fn governed(client: &reqwest::Client, addr: std::net::SocketAddr, namespace: &str) -> bool {
    let mut r = review(
        "p",
        "CREATE",
        namespace,
        &json!({"kind": "Deployment", "apiVersion": "apps/v1", "metadata": {"name": "x"}}),
    );
    r["request"]["object"] = json!("not an object");
    let body: Value = client
        .post(mutate_url(addr))
        .json(&r)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["response"]["allowed"], true, "{body}");
    body["response"].get("warnings").is_some()
}

async fn reloads(metrics_addr: std::net::SocketAddr, result: &str) -> f64 {
    let m = metrics_text(metrics_addr).await;
    sample(
        &m,
        &format!("knative_ha_webhook_policy_reloads_total{{result=\"{result}\"}}"),
    )
    .unwrap_or(0.0)
}

#[tokio::test]
async fn policy_file_hot_reload() {
    let pki = Pki::new("ca");
    let secret = SecretDir::new(&pki.server_leaf("s"));
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("policy.yaml");
    let original = std::fs::read_to_string(example_policy_path()).unwrap();
    std::fs::write(&path, &original).unwrap();
    let server = Running::start(Config::for_tests(
        secret.source(),
        PolicySource::File(path.clone()),
    ))
    .await;
    let c = client(&pki.ca_pem, server.addr, Proto::Http1, None);
    let addr = server.addr;

    assert!(governed(&c, addr, "knative-serving").await);
    assert!(!governed(&c, addr, "team-a").await);
    assert_eq!(reloads(server.metrics_addr, "success").await, 1.0);

    // A valid change: now governs team-a instead.
    std::fs::write(&path, original.replace("knative-serving", "team-a")).unwrap();
    assert!(
        becomes_true(Duration::from_secs(10), || {
            let c = c.clone();
            async move { governed(&c, addr, "team-a").await }
        })
        .await,
        "changed policy applied without restart"
    );
    assert!(!governed(&c, addr, "knative-serving").await);
    assert_eq!(reloads(server.metrics_addr, "success").await, 2.0);

    // Invalid changes: counted, the previous policy stays.
    for (name, text) in [
        ("YAML syntax error", "spec: [".to_string()),
        (
            "unknown field",
            original.replace("replicas: 3", "replicaz: 3"),
        ),
    ] {
        let before = reloads(server.metrics_addr, "error").await;
        std::fs::write(&path, &text).unwrap();
        let m = server.metrics_addr;
        assert!(
            becomes_true(Duration::from_secs(10), || async move {
                reloads(m, "error").await > before
            })
            .await,
            "{name}: counted"
        );
        assert!(
            governed(&c, addr, "team-a").await,
            "{name}: previous policy kept"
        );
        assert!(!governed(&c, addr, "knative-serving").await, "{name}");
        let (code, _) = get_status(server.metrics_addr, "/readyz").await;
        assert_eq!(code, 200, "{name}: still ready on the last good policy");
    }
    server.stop().await;
}
