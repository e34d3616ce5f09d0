//! `knative-ha-webhook audit` against the fake API server: the built
//! binary with KUBECONFIG pointing at it, before and after reconciling the
//! real Knative v1.23.0 control plane. Exit codes: 0 in line, 1 drift,
//! 2 errors.

use crate::support;
use crate::support::cli::Out;
use crate::support::cluster::reconcile_all;
use crate::support::fakeapi;

use std::collections::BTreeSet;
use std::path::Path;

use fakeapi::FakeApi;
use knative_ha_webhook::policy::Policy;
use knative_ha_webhook::reconcile::plan;
use serde_json::Value;

const SERVING: &str = "knative-serving";

fn load_control_plane(api: &FakeApi) {
    for ((group, plural), obj) in support::corpus::reconciled_objects() {
        api.create(group, plural, obj);
    }
}

async fn audit(kubeconfig: &Path, args: &[&str]) -> Out {
    audit_with(Some(kubeconfig), args).await
}

/// `audit` with KUBECONFIG set to `kubeconfig`, or unset (and an empty HOME).
async fn audit_with(kubeconfig: Option<&Path>, args: &[&str]) -> Out {
    crate::support::cli::cluster_command("audit", kubeconfig, args).await
}

fn example_policy() -> (String, Policy) {
    let path = support::repo_path("examples/policy.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    (
        path.display().to_string(),
        Policy::from_yaml(&text).unwrap(),
    )
}

/// (kind, name) of the knative-serving objects that drift, computed with
/// the library's planner on the objects in the fake.
fn drifting(api: &FakeApi, policy: &Policy) -> BTreeSet<(String, String)> {
    let mut objects: Vec<Value> = Vec::new();
    for (g, p) in [
        ("apps", "deployments"),
        ("autoscaling", "horizontalpodautoscalers"),
        ("policy", "poddisruptionbudgets"),
    ] {
        objects.extend(api.list(g, p));
    }
    objects.extend(api.get("", "configmaps", SERVING, "config-leader-election"));
    let targets = objects
        .iter()
        .filter(|o| o["kind"] == "HorizontalPodAutoscaler" && o["metadata"]["namespace"] == SERVING)
        .filter_map(|o| {
            o["spec"]["scaleTargetRef"]["name"]
                .as_str()
                .map(str::to_string)
        })
        .collect();
    let known = knative_ha_webhook::engine::Snapshot::from_policies([policy.clone()])
        .knowing(SERVING, targets, None);
    objects.retain(|o| o["metadata"]["namespace"] == SERVING);
    let mut drifting: BTreeSet<(String, String)> = objects
        .iter()
        .filter_map(|o| plan::plan(&known, SERVING, o, true).unwrap())
        .map(|d| (d.kind.as_str().to_string(), d.name))
        .collect();
    // The budgets the reconciler creates count as drift until they exist.
    drifting.extend(
        knative_ha_webhook::engine::budgets::plan(&known, SERVING, &objects)
            .into_iter()
            .map(|c| ("PodDisruptionBudget".to_string(), c.name)),
    );
    drifting
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_file_drift_before_none_after_table_and_json() {
    let api = FakeApi::start().await;
    load_control_plane(&api);
    let (file, policy) = example_policy();
    let kc = api.kubeconfig_path();
    let want = drifting(&api, &policy);
    assert!(want.len() >= 5, "{want:?}");

    // Before: table.
    let out = audit(kc, &["--policy", &file]).await;
    assert_eq!(
        out.code, 1,
        "stdout:\n{}\nstderr:\n{}",
        out.stdout, out.stderr
    );
    let t = &out.stdout;
    assert!(
        t.contains("namespace knative-serving: policy serving (file)"),
        "{t}"
    );
    let header = t
        .lines()
        .find(|l| l.starts_with("NAMESPACE"))
        .expect("table header");
    assert!(
        header.contains("KIND") && header.contains("CHANGE"),
        "{header}"
    );
    let controller_rows: Vec<&str> = t
        .lines()
        .filter(|l| {
            l.split_whitespace().take(3).collect::<Vec<_>>()
                == ["knative-serving", "Deployment", "controller"]
        })
        .collect();
    assert!(
        controller_rows
            .iter()
            .any(|l| l.contains("  spec.replicas ") && l.ends_with(" -> 3 (policy serving)")),
        "{t}"
    );
    // Pod-template changes are marked; the example policy's anti-affinity
    // change lands on net-kourier-controller (Knative's own Deployments
    // already carry a matching Preferred term).
    let anti_affinity_rows: Vec<&str> = t.lines().filter(|l| l.contains("anti-affinity")).collect();
    assert!(!anti_affinity_rows.is_empty(), "{t}");
    assert!(
        anti_affinity_rows
            .iter()
            .all(|l| l.starts_with("knative-serving  Deployment") && l.ends_with("(rolls pods)")),
        "{t}"
    );
    assert!(
        !controller_rows
            .iter()
            .any(|l| l.contains("spec.replicas") && l.contains("rolls pods")),
        "replicas do not roll pods: {t}"
    );
    assert!(
        t.contains(&format!("drift: {} of ", want.len())),
        "summary counts the drifting objects: {t}"
    );
    assert!(
        !t.contains("kourier-system"),
        "only governed namespaces: {t}"
    );

    // Before: JSON.
    let out = audit(kc, &["--policy", &file, "-o", "json"]).await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    let j: Value = serde_json::from_str(&out.stdout).expect("JSON output");
    assert_eq!(j["inLine"], false);
    let got: BTreeSet<(String, String)> = j["drift"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["kind"].as_str().unwrap().to_string(),
                d["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(got, want);
    let hpa = j["drift"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["kind"] == "HorizontalPodAutoscaler" && d["name"] == "activator")
        .expect("activator HPA drifts");
    assert_eq!(hpa["changes"][0]["rollsPods"], false);

    // After reconciling: in line, exit 0, in both formats.
    assert!(reconcile_all(&api, &policy).await.written() > 0);
    let out = audit(kc, &["--policy", &file]).await;
    assert_eq!(
        out.code, 0,
        "stdout:\n{}\nstderr:\n{}",
        out.stdout, out.stderr
    );
    assert!(out.stdout.contains("in line: all "), "{}", out.stdout);
    let out = audit(
        kc,
        &["--policy", &file, "-o", "json", "--namespace", SERVING],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let j: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(j["inLine"], true);
    assert_eq!(j["drift"], serde_json::json!([]));
    assert!(j["objects"].as_u64().unwrap() >= 8, "{j}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_policies_are_used_without_policy_file() {
    let api = FakeApi::start().await;
    load_control_plane(&api);
    let (_, policy) = example_policy();
    let text = std::fs::read_to_string(support::repo_path("examples/policy.yaml")).unwrap();
    let value: Value = serde_saphyr::from_str(&text).unwrap();
    api.create("knativeha.dev", "highavailabilitypolicies", value);
    // An invalid policy ConfigMap is reported as a warning, not applied.
    api.create(
        "",
        "configmaps",
        serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "broken", "namespace": "khw-system",
                         "labels": {"knativeha.dev/policy": "true"}},
            "data": {"policy.yaml": "spec: [unclosed"},
        }),
    );
    let kc = api.kubeconfig_path();
    let out = audit(kc, &["-o", "json"]).await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    let j: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(j["policies"][0]["source"], "HighAvailabilityPolicy/serving");
    assert_eq!(j["policies"][0]["namespace"], SERVING);
    let warnings = j["warnings"].to_string();
    assert!(
        warnings.contains("ConfigMap/khw-system/broken"),
        "{warnings}"
    );
    assert!(!j["drift"].as_array().unwrap().is_empty());

    assert!(reconcile_all(&api, &policy).await.written() > 0);
    let out = audit(kc, &["--webhook-namespace", "khw-system"]).await;
    assert_eq!(
        out.code, 0,
        "stdout:\n{}\nstderr:\n{}",
        out.stdout, out.stderr
    );
    assert!(
        out.stdout.contains("(HighAvailabilityPolicy/serving)"),
        "{}",
        out.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_exit_2_with_a_clear_message() {
    let api = FakeApi::start().await;
    load_control_plane(&api);
    let (file, _) = example_policy();
    let kc = api.kubeconfig_path().to_path_buf();

    let cases: Vec<(&str, Vec<String>, &str)> = vec![
        (
            "namespace not governed",
            vec![
                "--policy".into(),
                file.clone(),
                "--namespace".into(),
                "nope".into(),
            ],
            "namespace \"nope\" is not governed by any policy",
        ),
        (
            "no policy in the cluster",
            vec![],
            "no policy found in the cluster",
        ),
        (
            "policy file missing",
            vec!["--policy".into(), "/nonexistent/policy.yaml".into()],
            "/nonexistent/policy.yaml: cannot read file",
        ),
    ];
    for (what, args, message) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = audit(&kc, &args).await;
        assert_eq!(
            out.code, 2,
            "{what}: stdout {} stderr {}",
            out.stdout, out.stderr
        );
        assert!(
            out.stderr.contains("error: audit: "),
            "{what}: {}",
            out.stderr
        );
        assert!(out.stderr.contains(message), "{what}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{what}: {}", out.stdout);
    }

    // A refused list: the API server's message and code, not the client's types.
    api.fail_lists("", "configmaps", &[403]);
    let out = audit(&kc, &[]).await;
    assert_eq!(out.code, 2, "stdout {} stderr {}", out.stdout, out.stderr);
    assert!(
        out.stderr
            .starts_with("error: audit: listing policy ConfigMaps: ")
            && out.stderr.ends_with("(HTTP 403)\n"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("ApiError"), "{}", out.stderr);

    // The API server going away is an error too, not "in line", and the
    // message names the server and the reason.
    api.stop().await;
    let out = audit(&kc, &["--policy", &file]).await;
    assert_eq!(out.code, 2, "stdout {} stderr {}", out.stdout, out.stderr);
    assert_eq!(
        out.stderr,
        format!(
            "error: audit: cannot reach the Kubernetes API server at {}: connection refused\n",
            api.url()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubeconfig_context_and_output_flags() {
    let api = FakeApi::start().await;
    load_control_plane(&api);
    let (file, policy) = example_policy();
    let kc = api.kubeconfig_path().to_str().unwrap().to_string();
    let want = drifting(&api, &policy);

    // --kubeconfig and --context instead of KUBECONFIG; --policy-file; -o yaml.
    let out = audit_with(
        None,
        &[
            "--kubeconfig",
            &kc,
            "--context",
            "fake",
            "--policy-file",
            &file,
            "-o",
            "yaml",
        ],
    )
    .await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    let y: Value = serde_saphyr::from_str(&out.stdout).expect("YAML report");
    assert_eq!(y["inLine"], false);
    assert_eq!(y["drift"].as_array().unwrap().len(), want.len());

    // A context the kubeconfig does not have.
    let out = audit_with(
        None,
        &[
            "--kubeconfig",
            &kc,
            "--context",
            "nope",
            "--policy-file",
            &file,
        ],
    )
    .await;
    assert_eq!(out.code, 2, "{}", out.stdout);
    assert_eq!(
        out.stderr,
        format!(
            "error: audit: context \"nope\" is not in kubeconfig {kc}; `kubectl config get-contexts` lists the contexts\n"
        )
    );

    // --request-timeout against a server that accepts and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = silent.local_addr().unwrap().port();
    let held = tokio::spawn(async move {
        let mut conns = Vec::new();
        while let Ok((c, _)) = silent.accept().await {
            conns.push(c);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let silent_kc = dir.path().join("kubeconfig");
    std::fs::write(
        &silent_kc,
        std::fs::read_to_string(&kc).unwrap().replace(
            &format!("127.0.0.1:{}", api.port()),
            &format!("127.0.0.1:{port}"),
        ),
    )
    .unwrap();
    let out = audit_with(
        Some(&silent_kc),
        &["--request-timeout", "1s", "--policy-file", &file],
    )
    .await;
    held.abort();
    assert_eq!(out.code, 2, "{}", out.stdout);
    assert_eq!(
        out.stderr,
        format!(
            "error: audit: cannot reach the Kubernetes API server at http://127.0.0.1:{port}: timed out\n"
        )
    );
}
