//! `serve --reconcile` end to end: the built binary with a policy file and
//! KUBECONFIG pointing at the fake API server brings the existing Knative
//! v1.23.0 objects in line (one log line per object written), and on
//! SIGTERM gives its Lease up.

use crate::support;
use crate::support::fakeapi;

use std::process::Stdio;

use fakeapi::FakeApi;
use knative_ha_webhook::engine::Snapshot;
use knative_ha_webhook::policy::Policy;
use knative_ha_webhook::reconcile::plan;
use serde_json::Value;
use support::wait_until;
use tokio::io::AsyncReadExt;

const SERVING: &str = "knative-serving";
const OWN_NS: &str = "khw-system";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_reconcile_writes_each_drifting_object_once_and_releases_the_lease() {
    let api = FakeApi::start().await;
    let mut drifting = Vec::new();
    let policy_path = support::repo_path("examples/policy.yaml");
    let policy = Policy::from_yaml(&std::fs::read_to_string(&policy_path).unwrap()).unwrap();
    let targets = ["activator".to_string(), "webhook".to_string()].into();
    let known = Snapshot::from_policies([policy.clone()]).knowing(SERVING, targets, None);
    for ((group, plural), obj) in support::corpus::reconciled_objects() {
        let created = api.create(group, plural, obj);
        if created["metadata"]["namespace"] == SERVING
            && plan::plan(&known, SERVING, &created, true)
                .unwrap()
                .is_some()
        {
            drifting.push((
                group,
                plural,
                created["metadata"]["name"].as_str().unwrap().to_string(),
            ));
        }
    }
    assert!(drifting.len() >= 5, "{drifting:?}");
    let budgets = created_budgets(&api, &known);
    assert!(
        budgets.contains(&"controller-pdb".to_string()),
        "{budgets:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_knative-ha-webhook"))
        .args(["serve", "--self-signed"])
        .arg(dir.path().join("ca.pem"))
        .arg("--policy-file")
        .arg(&policy_path)
        .args([
            "--namespace",
            OWN_NS,
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--shutdown-delay",
            "0s",
        ])
        .env("KUBECONFIG", api.kubeconfig_path())
        .env("HOME", dir.path())
        .env("POD_NAME", "webhook-0")
        // The reconcile settings as the chart renders them (env vars).
        .env("KHW_RECONCILE", "true")
        .env("KHW_RECONCILE_INTERVAL", "10m")
        .env("KHW_RECONCILE_DRY_RUN", "false")
        .env("KHW_RECONCILE_POD_TEMPLATES", "true")
        .env("KHW_RECONCILE_RATE", "50")
        .env("RUST_LOG", "info")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start serve");
    let mut stderr = child.stderr.take().unwrap();
    let logs = tokio::spawn(async move {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s).await;
        s
    });

    wait_until("every drifting object written", async || {
        drifting
            .iter()
            .all(|(g, p, n)| api.patches_of(g, p, SERVING, n) == 1)
            .then_some(())
            .filter(|()| {
                budgets.iter().all(|n| {
                    api.get("policy", "poddisruptionbudgets", SERVING, n)
                        .is_some()
                })
            })
    })
    .await;
    let lease = api
        .get(
            "coordination.k8s.io",
            "leases",
            OWN_NS,
            "knative-ha-webhook-reconcile",
        )
        .expect("lease created");
    assert_eq!(lease["spec"]["holderIdentity"], "webhook-0");
    let controller = api
        .get("apps", "deployments", SERVING, "controller")
        .unwrap();
    assert_eq!(controller["spec"]["replicas"], 3);

    // SIGTERM: the server stops and releases the Lease.
    let pid = child.id().expect("pid").to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = tokio::time::timeout(std::time::Duration::from_secs(20), child.wait())
        .await
        .expect("serve exits after SIGTERM")
        .unwrap();
    assert!(exit.success(), "{exit:?}");
    let lease = api
        .get(
            "coordination.k8s.io",
            "leases",
            OWN_NS,
            "knative-ha-webhook-reconcile",
        )
        .unwrap();
    assert!(lease["spec"]["holderIdentity"].is_null(), "{lease}");

    let logs = logs.await.unwrap();
    let written: Vec<Value> = logs
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["message"] == "reconcile: written")
        .collect();
    assert_eq!(
        written.len(),
        drifting.len() + budgets.len(),
        "one log line per write (each created budget one):\n{logs}"
    );
    for name in &budgets {
        let pdb = api
            .get("policy", "poddisruptionbudgets", SERVING, name)
            .expect("budget created");
        assert_eq!(pdb["spec"]["maxUnavailable"], 1, "{pdb}");
    }
    for (_, _, name) in &drifting {
        assert!(
            written.iter().any(|l| l["name"] == name.as_str()),
            "no log line for {name}"
        );
    }
    // No more writes than one per object.
    for (g, p, n) in &drifting {
        assert_eq!(api.patches_of(g, p, SERVING, n), 1, "{n}");
    }
}

/// `KHW_RECONCILE` is read as a boolean: "false" leaves the reconciler off
/// (so the missing namespace is no error), "true" turns it on.
#[test]
fn khw_reconcile_env_is_a_boolean() {
    let cases = [
        ("true", "--reconcile needs the webhook's namespace"),
        ("false", "reading policy file /nonexistent/policy.yaml"),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (value, want) in cases {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_knative-ha-webhook"))
            .args(["serve", "--self-signed"])
            .arg(dir.path().join("ca.pem"))
            .args(["--policy-file", "/nonexistent/policy.yaml"])
            .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
            .env("KHW_RECONCILE", value)
            .env_remove("POD_NAMESPACE")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "KHW_RECONCILE={value}");
        assert!(stderr.contains(want), "KHW_RECONCILE={value}: {stderr}");
    }
}

/// Dry run through the binary: one `drift (dry run; not written)` log line
/// per drifting object, and not a single PATCH.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_reconcile_dry_run_logs_drift_and_writes_nothing() {
    use tokio::io::AsyncBufReadExt;
    let api = FakeApi::start().await;
    let policy_path = support::repo_path("examples/policy.yaml");
    let policy = Policy::from_yaml(&std::fs::read_to_string(&policy_path).unwrap()).unwrap();
    let known = Snapshot::from_policies([policy.clone()]);
    let mut drifting = std::collections::BTreeSet::new();
    let mut all = Vec::new();
    for ((group, plural), obj) in support::corpus::reconciled_objects() {
        let created = api.create(group, plural, obj);
        let name = created["metadata"]["name"].as_str().unwrap().to_string();
        let ns = created["metadata"]["namespace"]
            .as_str()
            .unwrap()
            .to_string();
        if ns == SERVING
            && plan::plan(&known, SERVING, &created, true)
                .unwrap()
                .is_some()
        {
            drifting.insert(name.clone());
        }
        all.push((group, plural, ns, name));
    }
    drifting.extend(created_budgets(&api, &known));
    let dir = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_knative-ha-webhook"))
        .args(["serve", "--self-signed"])
        .arg(dir.path().join("ca.pem"))
        .arg("--policy-file")
        .arg(&policy_path)
        .args(["--namespace", OWN_NS, "--listen", "127.0.0.1:0"])
        .args(["--metrics-listen", "127.0.0.1:0", "--shutdown-delay", "0s"])
        .args(["--reconcile", "--reconcile-dry-run"])
        .env("KUBECONFIG", api.kubeconfig_path())
        .env("HOME", dir.path())
        .env("RUST_LOG", "info")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start serve");
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Value>::new()));
    let sink = lines.clone();
    let mut reader = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    tokio::spawn(async move {
        while let Ok(Some(line)) = reader.next_line().await {
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                sink.lock().unwrap().push(v);
            }
        }
    });
    let logged = wait_until("a dry-run log line per drifting object", async || {
        let got: std::collections::BTreeSet<String> = lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l["message"] == "reconcile: drift (dry run; not written)")
            .filter_map(|l| l["name"].as_str().map(str::to_string))
            .collect();
        (got == drifting).then_some(got)
    })
    .await;
    assert!(logged.len() >= 5, "{logged:?}");
    let _ = child.start_kill();
    for (g, p, ns, n) in &all {
        assert_eq!(api.patches_of(g, p, ns, n), 0, "{ns}/{n}");
    }
}

/// The budgets the reconciler creates in the serving namespace of `api`
/// for `policy` ([`knative_ha_webhook::reconcile::budgets`]).
fn created_budgets(api: &FakeApi, known: &Snapshot) -> Vec<String> {
    let mut objects = api.list("apps", "deployments");
    objects.extend(api.list("policy", "poddisruptionbudgets"));
    objects.retain(|o| o["metadata"]["namespace"] == SERVING);
    knative_ha_webhook::engine::budgets::plan(known, SERVING, &objects)
        .into_iter()
        .map(|c| c.name)
        .collect()
}
