//! End to end: the real `knative-ha-webhook serve` binary without
//! `--policy-file`, reading policies from the fake API server through
//! `KUBECONFIG`; checked over HTTPS `/mutate`, `/readyz`, `/metrics` and the
//! log.

use crate::support;
use crate::support::cluster::{GROUP, HAPS, hap};
use crate::support::fakeapi;

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use base64::Engine as _;
use fakeapi::FakeApi;
use serde_json::{Value, json};
use support::wait::{WAIT, wait_until_within};

/// How long the checks below wait: the binary starts and syncs first.
const SERVE_WAIT: std::time::Duration = WAIT.saturating_mul(2);
use tokio::process::{Child, Command};

const OWN_NS: &str = "khw-system";
const SERVING: &str = "knative-serving";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Webhook {
    child: Child,
    https: SocketAddr,
    metrics: SocketAddr,
    dir: tempfile::TempDir,
}

impl Webhook {
    /// `serve` finding the fake API server through `KUBECONFIG`.
    fn start(api: &FakeApi) -> Webhook {
        Webhook::start_with(|cmd| {
            cmd.env("KUBECONFIG", api.kubeconfig_path());
        })
    }

    /// `serve`, with `cluster` saying how it finds the API server.
    fn start_with(cluster: impl FnOnce(&mut Command)) -> Webhook {
        knative_ha_webhook::tls::install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        let https = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let log = std::fs::File::create(dir.path().join("log")).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_knative-ha-webhook"));
        cmd.args(["serve", "--self-signed"])
            .arg(dir.path().join("ca.pem"))
            .args(["--namespace", OWN_NS, "--shutdown-delay", "0s"])
            .args(["--log-format", "text"])
            .arg("--listen")
            .arg(https.to_string())
            .arg("--metrics-listen")
            .arg(metrics.to_string())
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KHW_POLICY_FILE")
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true);
        cluster(&mut cmd);
        let child = cmd.spawn().expect("start knative-ha-webhook serve");
        Webhook {
            child,
            https,
            metrics,
            dir,
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }

    async fn get(&self, path: &str) -> Option<(u16, String)> {
        let resp = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap()
            .get(format!("http://{}{path}", self.metrics))
            .send()
            .await
            .ok()?;
        let status = resp.status().as_u16();
        Some((status, resp.text().await.ok()?))
    }

    /// POSTs a CREATE review of the controller Deployment over HTTPS;
    /// returns `spec.replicas` after the returned patch (None: no patch) and
    /// the warnings.
    async fn mutate(&self) -> Option<(Option<Value>, String)> {
        let ca = std::fs::read_to_string(self.dir.path().join("ca.pem")).ok()?;
        knative_ha_webhook::tls::install_crypto_provider();
        let client = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).ok()?)
            .resolve("localhost", self.https)
            .timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        let object = support::corpus::controller_deployment();
        let review = support::corpus::review(
            "11111111-0000-0000-0000-000000000001",
            "CREATE",
            SERVING,
            &object,
        );
        let resp = client
            .post(format!("https://localhost:{}/mutate", self.https.port()))
            .json(&review)
            .send()
            .await
            .ok()?;
        let body: Value = resp.json().await.ok()?;
        let response = &body["response"];
        assert_eq!(response["allowed"], true, "{body}");
        let warnings = response["warnings"].to_string();
        let Some(patch) = response["patch"].as_str() else {
            return Some((None, warnings));
        };
        let raw = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .unwrap();
        let patch: json_patch::Patch = serde_json::from_slice(&raw).unwrap();
        let mut obj = object;
        json_patch::patch(&mut obj, &patch).unwrap();
        Some((Some(obj["spec"]["replicas"].clone()), warnings))
    }
}

#[tokio::test]
async fn serve_reads_policies_from_the_cluster() {
    let api = FakeApi::start().await;
    api.hold_lists("autoscaling", "horizontalpodautoscalers");
    api.create(GROUP, HAPS, hap("serving", SERVING, 3));
    let mut wh = Webhook::start(&api);

    // Not ready while a first list is outstanding; reviews are admitted
    // unpatched with a warning.
    wait_until_within(SERVE_WAIT, "the HPA list to be requested", async || {
        api.requests()
            .iter()
            .any(|r| {
                r.path == "/apis/autoscaling/v2/namespaces/knative-serving/horizontalpodautoscalers"
            })
            .then_some(())
    })
    .await;
    let (status, _) =
        wait_until_within(SERVE_WAIT, "/readyz to answer", || wh.get("/readyz")).await;
    assert_ne!(status, 200, "not ready before the first full sync");
    let (replicas, warnings) =
        wait_until_within(SERVE_WAIT, "/mutate to answer", || wh.mutate()).await;
    assert_eq!(replicas, None);
    assert!(warnings.contains("not yet synced"), "{warnings}");

    api.release_lists("autoscaling", "horizontalpodautoscalers");
    wait_until_within(SERVE_WAIT, "/readyz 200", async || {
        matches!(wh.get("/readyz").await, Some((200, _))).then_some(())
    })
    .await;
    wait_until_within(SERVE_WAIT, "/mutate sets replicas 3", async || {
        let (r, _) = wh.mutate().await?;
        (r == Some(json!(3))).then_some(())
    })
    .await;

    // Edit, then break it: the valid edit applies, the broken one does not.
    api.update(GROUP, HAPS, "", "serving", |o| {
        o["spec"]["replicas"] = json!(5)
    });
    wait_until_within(SERVE_WAIT, "/mutate sets replicas 5", async || {
        let (r, _) = wh.mutate().await?;
        (r == Some(json!(5))).then_some(())
    })
    .await;
    api.update(GROUP, HAPS, "", "serving", |o| {
        o["spec"]["replicas"] = json!(0)
    });
    wait_until_within(
        SERVE_WAIT,
        "Ready=False/Invalid on the resource",
        async || {
            let obj = api.get(GROUP, HAPS, "", "serving")?;
            let c = &obj["status"]["conditions"][0];
            (c["reason"] == "Invalid" && c["observedGeneration"] == obj["metadata"]["generation"])
                .then_some(())
        },
    )
    .await;
    let (replicas, _) = wh.mutate().await.unwrap();
    assert_eq!(replicas, Some(json!(5)), "the last valid version stays");

    let (_, metrics) = wh.get("/metrics").await.unwrap();
    for line in [
        r#"knative_ha_webhook_source_up{source="policies"} 1"#,
        r#"knative_ha_webhook_policy_status{state="invalid"} 1"#,
        "knative_ha_webhook_cluster_synced 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
    }

    api.delete(GROUP, HAPS, "", "serving");
    wait_until_within(SERVE_WAIT, "/mutate without a patch", async || {
        let (r, _) = wh.mutate().await?;
        r.is_none().then_some(())
    })
    .await;
    wh.child.kill().await.unwrap();
}

#[tokio::test]
async fn serve_takes_kubeconfig_and_context_flags_over_the_environment() {
    let api = FakeApi::start().await;
    api.create(GROUP, HAPS, hap("serving", SERVING, 3));
    // The current-context is a dead server; only `--context fake` reaches
    // the fake API server, and KUBECONFIG names a file that does not exist.
    let fake = std::fs::read_to_string(api.kubeconfig_path()).unwrap();
    let kubeconfig = fake
        .replace(
            "contexts:\n",
            "contexts:\n- name: dead\n  context:\n    cluster: dead\n    user: fake\n",
        )
        .replace(
            "clusters:\n",
            "clusters:\n- name: dead\n  cluster:\n    server: http://127.0.0.1:1\n",
        )
        .replace("current-context: fake", "current-context: dead");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, kubeconfig).unwrap();
    let mut wh = Webhook::start_with(|cmd| {
        cmd.env("KUBECONFIG", "/nonexistent/kubeconfig")
            .arg("--kubeconfig")
            .arg(&path)
            .args(["--context", "fake"]);
    });
    wait_until_within(SERVE_WAIT, "/mutate sets replicas 3", async || {
        let (r, _) = wh.mutate().await?;
        (r == Some(json!(3))).then_some(())
    })
    .await;
    wh.child.kill().await.unwrap();
}

#[tokio::test]
async fn serve_without_the_crd_uses_configmaps_and_says_so_once() {
    let api = FakeApi::start().await;
    api.set_installed(GROUP, HAPS, false);
    api.create(
        "",
        "configmaps",
        json!({
            "metadata": {"name": "ha", "namespace": OWN_NS,
                         "labels": {"knativeha.dev/policy": "true"}},
            "data": {"policy.yaml": format!(
                "apiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\nmetadata: {{name: from-cm}}\nspec: {{targetNamespace: {SERVING}, replicas: 2}}\n")},
        }),
    );
    let mut wh = Webhook::start(&api);
    wait_until_within(SERVE_WAIT, "/readyz 200", async || {
        matches!(wh.get("/readyz").await, Some((200, _))).then_some(())
    })
    .await;
    wait_until_within(SERVE_WAIT, "/mutate sets replicas 2", async || {
        let (r, _) = wh.mutate().await?;
        (r == Some(json!(2))).then_some(())
    })
    .await;
    // The CRD list has been retried (404 each time) at least once more.
    let hap_lists = || {
        api.requests()
            .iter()
            .filter(|r| {
                r.path == "/apis/knativeha.dev/v1alpha1/highavailabilitypolicies"
                    && !r.query.contains("watch")
            })
            .count()
    };
    wait_until_within(SERVE_WAIT, "a retried CRD list", async || {
        (hap_lists() >= 2).then_some(())
    })
    .await;
    let log = wh.log();
    assert_eq!(
        log.matches("HighAvailabilityPolicy CRD not installed; using ConfigMaps only")
            .count(),
        1,
        "said once:\n{log}"
    );
    wh.child.kill().await.unwrap();
}
