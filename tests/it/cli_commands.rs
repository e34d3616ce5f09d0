//! The built binary: `preview` (yaml and patches), `check`, `crd` and bad
//! input, which must name the file and the document index.

use crate::support;

use serde_json::{Value, json};
use support::{FIXTURES, apply_rfc6902, repo_path, run, run_stdin, stderr, stdout};

fn parse_multi(text: &str) -> Vec<Value> {
    knative_ha_webhook::policy::split_documents(text)
        .into_iter()
        .map(|(_, d)| serde_saphyr::from_str::<Value>(&d).expect("output is YAML"))
        .collect()
}

fn key(v: &Value) -> (String, String, String) {
    (
        v["kind"].as_str().unwrap_or("").to_string(),
        v["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_string(),
        v["metadata"]["name"].as_str().unwrap_or("").to_string(),
    )
}

#[test]
fn preview_yaml_prints_every_document_in_order_mutated_where_governed() {
    let mut args = vec!["preview", "--policy", "examples/policy.yaml"];
    args.extend(FIXTURES);
    let out = run(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let mut docs = parse_multi(&text);
    let input = support::fixture_objects();
    // After the documents, the budgets the reconciler creates for the scaled
    // components that ship none.
    let created = docs.split_off(input.len());
    assert_eq!(
        created.iter().map(key).collect::<Vec<_>>(),
        [
            "autoscaler-pdb",
            "controller-pdb",
            "autoscaler-hpa-pdb",
            "net-kourier-controller-pdb"
        ]
        .map(|n| (
            "PodDisruptionBudget".to_string(),
            "knative-serving".to_string(),
            n.to_string()
        ))
    );
    assert_eq!(
        docs.iter().map(key).collect::<Vec<_>>(),
        input.iter().map(key).collect::<Vec<_>>()
    );
    assert!(text.contains("\n---\n"));

    let find = |kind: &str, name: &str| {
        docs.iter()
            .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
            .unwrap()
    };
    assert_eq!(find("Deployment", "controller")["spec"]["replicas"], 3);
    assert_eq!(
        find("HorizontalPodAutoscaler", "activator")["spec"]["minReplicas"],
        5
    );
    let cm = find("ConfigMap", "config-leader-election");
    assert_eq!(cm["data"]["buckets"], "5");
    let original_cm = input
        .iter()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "config-leader-election")
        .unwrap();
    assert_eq!(cm["data"]["_example"], original_cm["data"]["_example"]);
    // Knative's own annotations unchanged; the engine adds only its records
    // of the release values (what `restore` puts back) and of its own
    // writes.
    let mut metadata = cm["metadata"].clone();
    let annotations = metadata["annotations"].as_object_mut().unwrap();
    assert_eq!(annotations["knativeha.dev/written-data-buckets"], "\"5\"");
    annotations.retain(|k, _| {
        !k.starts_with("knativeha.dev/original-data-")
            && !k.starts_with("knativeha.dev/written-data-")
    });
    assert_eq!(metadata, original_cm["metadata"]);
    // untouched documents round-trip unchanged
    let gw = find("Deployment", "3scale-kourier-gateway");
    let original_gw = input
        .iter()
        .find(|d| d["kind"] == "Deployment" && d["metadata"]["name"] == "3scale-kourier-gateway")
        .unwrap();
    assert_eq!(gw, original_gw);
    // every document the policy does not govern round-trips to the same value
    // (quoting of "true", "1.23.0", "" etc. survives the YAML writer)
    let governed = [
        "config-leader-election",
        "activator",
        "activator-pdb",
        "autoscaler",
        "controller",
        "webhook",
        "webhook-pdb",
        "autoscaler-hpa",
        "net-kourier-controller",
    ];
    let mut same = 0;
    for (out_doc, in_doc) in docs.iter().zip(&input) {
        let name = in_doc["metadata"]["name"].as_str().unwrap_or("");
        if in_doc["metadata"]["namespace"] != "knative-serving" || !governed.contains(&name) {
            assert_eq!(out_doc, in_doc, "{:?}", key(in_doc));
            same += 1;
        }
    }
    assert!(same > 50, "{same}");
    // long image references stay plain scalars (no folded `>-` blocks)
    assert!(
        !text.contains("image: >"),
        "folded image reference in output"
    );
}

#[test]
fn preview_patches_prints_one_json_line_per_changed_document() {
    let mut args = vec![
        "preview",
        "--policy",
        "examples/policy.yaml",
        "--output",
        "patches",
    ];
    args.extend(FIXTURES);
    let out = run(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let lines: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect();
    let got: Vec<(String, String)> = lines
        .iter()
        .map(|l| {
            (
                l["kind"].as_str().unwrap().to_string(),
                l["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want = [
        ("ConfigMap", "config-leader-election"),
        ("HorizontalPodAutoscaler", "activator"),
        // Not activator-pdb: from the activator's 5 replicas up, the
        // release's minAvailable 80% allows the fewest disruptions beyond
        // the policy's maxUnavailable 1 of any value of its field.
        // the zone spread and the PriorityClass
        ("Deployment", "activator"),
        ("Deployment", "autoscaler"),
        ("Deployment", "controller"),
        ("HorizontalPodAutoscaler", "webhook"),
        ("PodDisruptionBudget", "webhook-pdb"),
        ("Deployment", "webhook"),
        ("Deployment", "autoscaler-hpa"),
        ("Deployment", "net-kourier-controller"),
        // created by the reconciler, with an empty patch and the change line
        ("PodDisruptionBudget", "autoscaler-pdb"),
        ("PodDisruptionBudget", "controller-pdb"),
        ("PodDisruptionBudget", "autoscaler-hpa-pdb"),
        ("PodDisruptionBudget", "net-kourier-controller-pdb"),
    ];
    assert_eq!(got, want.map(|(k, n)| (k.to_string(), n.to_string())));
    let input = support::fixture_objects();
    for l in &lines {
        assert_eq!(l["namespace"], "knative-serving");
        assert!(l["apiVersion"].is_string());
        assert!(!l["changes"].as_array().unwrap().is_empty());
        let created = json!({});
        let original = input
            .iter()
            .find(|d| d["kind"] == l["kind"] && d["metadata"]["name"] == l["name"])
            .unwrap_or(&created);
        let applied = apply_rfc6902(original, &l["patch"]).expect("patch applies");
        assert_eq!(applied["metadata"]["name"], l["name"]);
    }
}

#[test]
fn preview_reads_stdin_and_defaults_namespace_less_documents_to_default() {
    let manifest = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: controller}\nspec: {replicas: 1}\n";
    let policy = std::fs::read_to_string(repo_path("examples/policy.yaml"))
        .unwrap()
        .replace(
            "targetNamespace: knative-serving",
            "targetNamespace: default",
        );
    let dir = tempfile::tempdir().unwrap();
    let policy_path = dir.path().join("p.yaml");
    std::fs::write(&policy_path, policy).unwrap();
    let p = policy_path.to_str().unwrap();
    for args in [
        vec!["preview", "--policy", p, "-o", "patches"],
        vec!["preview", "--policy", p, "-o", "patches", "-"],
    ] {
        let out = run_stdin(&args, manifest);
        assert!(out.status.success(), "{}", stderr(&out));
        let line: Value = serde_json::from_str(stdout(&out).trim()).unwrap();
        assert_eq!(line["namespace"], "default");
        assert_eq!(
            line["changes"][0],
            "deployment/controller: spec.replicas 1 -> 3 (policy serving)"
        );
    }
}

#[test]
fn preview_takes_several_policies_but_one_per_namespace() {
    let out = run(&[
        "preview",
        "--policy",
        "examples/policy.yaml",
        "--policy",
        "examples/policies/kourier-system.yaml",
        "-o",
        "patches",
        FIXTURES[2],
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("horizontalpodautoscaler/3scale-kourier-gateway: spec.minReplicas 1 -> 3, spec.maxReplicas 10 -> 12 (from the original 1/10) (policy kourier-gateway)"), "{text}");
    assert!(text.contains("deployment/net-kourier-controller"), "{text}");

    // the same two as one multi-document file
    let dir = tempfile::tempdir().unwrap();
    let both = dir.path().join("both.yaml");
    let a = std::fs::read_to_string(repo_path("examples/policy.yaml")).unwrap();
    let b = std::fs::read_to_string(repo_path("examples/policies/kourier-system.yaml")).unwrap();
    std::fs::write(&both, format!("{a}---\n{b}")).unwrap();
    let out = run(&[
        "preview",
        "--policy",
        both.to_str().unwrap(),
        "-o",
        "patches",
        FIXTURES[2],
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), text);

    let out = run(&[
        "preview",
        "--policy",
        "examples/policy.yaml",
        "--policy",
        "examples/policy.yaml",
        FIXTURES[1],
    ]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("knative-serving")
            && stderr(&out).contains("one policy per namespace"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn check_accepts_valid_policies() {
    let out = run(&["check", "examples/policy.yaml"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "examples/policy.yaml: valid (policy serving for namespace knative-serving)\n"
    );
    let out = run(&["check", "examples/policies/ha-disabled.yaml"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// `check` of a valid knative-serving policy with these spec lines: its
/// standard error (the warnings), each line after the `FILE: document 1: `
/// place.
fn check_warnings(spec: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.yaml");
    std::fs::write(
        &file,
        format!("apiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\nmetadata: {{name: p}}\nspec:\n  targetNamespace: knative-serving\n{spec}"),
    )
    .unwrap();
    let out = run(&["check", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let place = format!("{}: document 1: ", file.display());
    stderr(&out)
        .lines()
        .map(|l| l.strip_prefix(&place).unwrap_or(l).to_string())
        .collect()
}

#[test]
fn check_warns_where_required_anti_affinity_can_strand_replicas() {
    let warnings = check_warnings(
        "  replicas: 3\n  podAntiAffinity: {type: Required, topologyKey: topology.kubernetes.io/zone}\n  podDisruptionBudget: {maxUnavailable: 1}\n  workloads:\n  - {name: activator, replicas: 5}\n  - {name: controller, replicas: 2}\n",
    );
    assert_eq!(
        warnings,
        [
            "warning: spec.podAntiAffinity: Required anti-affinity on topology.kubernetes.io/zone with 3 replicas puts each replica of every governed Deployment without an HPA in its own topology.kubernetes.io/zone domain: with 3 domains or fewer, a replica stays Pending when one is lost or drained, and every later rollout waits for it (a topologySpreadConstraints entry with DoNotSchedule keeps replicas apart without stranding them)",
            // The activator (HPA-scaled: it gets Preferred) is not named; the controller is.
            "warning: spec.workloads[1].replicas: Required anti-affinity on topology.kubernetes.io/zone with 2 replicas puts each replica of deployment/controller in its own topology.kubernetes.io/zone domain: with 2 domains or fewer, a replica stays Pending when one is lost or drained, and every later rollout waits for it (a topologySpreadConstraints entry with DoNotSchedule keeps replicas apart without stranding them)",
        ]
    );
}

#[test]
fn check_warns_about_knative_deployments_of_another_namespace() {
    assert_eq!(
        check_warnings("  workloads:\n  - {name: 3scale-kourier-gateway, replicas: 3}\n"),
        [
            "warning: spec.workloads[0].name: \"3scale-kourier-gateway\" is a Knative Deployment of namespace kourier-system, not of this policy's knative-serving: the policy never meets it (give kourier-system a policy of its own)"
        ]
    );
}

/// An excluded Deployment is not restarted by the settings hash: under a
/// changed bucket count it runs the old one beside the new, two leaders per
/// key (seen with knative.dev/pkg's own leader election).
#[test]
fn check_warns_about_excluded_leader_elected_deployments() {
    assert_eq!(
        check_warnings("  leaderElection: {buckets: 3}\n  exclude: [activator, autoscaler-hpa]\n"),
        [
            "warning: spec.exclude[1]: \"autoscaler-hpa\" runs Knative's leader election but is excluded, so it is not restarted when spec.leaderElection changes: it keeps reading the old settings until it restarts, and while its bucket count differs every key it reconciles has two leaders"
        ]
    );
}

#[test]
fn check_warns_when_raised_replicas_meet_knatives_blocking_budgets() {
    assert_eq!(
        check_warnings("  replicas: 3\n"),
        [
            "warning: spec.replicas 3 without spec.podDisruptionBudget: the PodDisruptionBudgets Knative ships (minAvailable \"80%\") allow no voluntary disruption below 5 replicas, so every node drain would block; set spec.podDisruptionBudget (maxUnavailable: 1)"
        ]
    );
}

#[test]
fn check_rejects_invalid_policies_with_every_error_on_stderr() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    let text = std::fs::read_to_string(repo_path("examples/policy.yaml"))
        .unwrap()
        .replace("replicas: 3", "replicas: 0")
        .replace("buckets: 5 ", "buckets: 12 ");
    std::fs::write(&bad, text).unwrap();
    let out = run(&["check", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("bad.yaml: document 1: spec.replicas: must be between 1 and 100, got 0"),
        "{err}"
    );
    assert!(
        err.contains("spec.leaderElection.buckets") && err.contains("got 12"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 2, "{err}");
    assert!(stdout(&out).is_empty());

    std::fs::write(&bad, "apiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\nmetadata: {name: x}\nspec: {targetNamespace: a, replcas: 2}\n").unwrap();
    let out = run(&["check", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("spec.replcas: unknown field \"replcas\""),
        "{}",
        stderr(&out)
    );
}

#[test]
fn crd_prints_a_deterministic_parseable_crd() {
    let a = run(&["crd"]);
    let b = run(&["crd"]);
    assert!(a.status.success(), "{}", stderr(&a));
    assert_eq!(a.stdout, b.stdout);
    assert_eq!(
        stdout(&a),
        knative_ha_webhook::tools::preview::crd_yaml().unwrap()
    );
    let crd: Value = serde_saphyr::from_str(&stdout(&a)).unwrap();
    assert_eq!(crd["kind"], "CustomResourceDefinition");
    assert_eq!(crd["spec"]["group"], "knativeha.dev");
    assert_eq!(crd["spec"]["scope"], "Cluster");
}

#[test]
fn bad_input_names_the_file_and_the_document() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_string()
    };
    let ok_doc = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n";
    let yaml_error = write(
        "yaml-error.yaml",
        &format!("{ok_doc}---\nkind: [unclosed\n"),
    );
    let not_object = write(
        "list.yaml",
        &format!("# header\n---\n{ok_doc}---\n- a\n- b\n"),
    );
    let no_kind = write(
        "nokind.yaml",
        &format!("{ok_doc}---\n---\nmetadata: {{name: x}}\n"),
    );
    let missing = dir
        .path()
        .join("missing.yaml")
        .to_str()
        .unwrap()
        .to_string();
    let cases: [(&str, &str, &[&str]); 4] = [
        (
            "YAML error",
            &yaml_error,
            &["yaml-error.yaml", "document 2", "invalid YAML"],
        ),
        (
            "not a mapping (comment before the first --- is no document)",
            &not_object,
            &["list.yaml", "document 2", "not a Kubernetes object"],
        ),
        (
            "no apiVersion/kind",
            &no_kind,
            &["nokind.yaml", "document 3", "not a Kubernetes object"],
        ),
        ("missing file", &missing, &["missing.yaml", "cannot read"]),
    ];
    for (name, file, needles) in cases {
        let out = run(&["preview", "--policy", "examples/policy.yaml", file]);
        assert!(!out.status.success(), "{name}");
        let err = stderr(&out);
        for n in needles {
            assert!(err.contains(n), "{name}: {n:?} not in {err}");
        }
        assert!(
            stdout(&out).is_empty(),
            "{name}: printed output despite the error"
        );
    }
    let out = run(&["check", &missing]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("missing.yaml"));
    let out = run(&["preview", "--policy", &missing, FIXTURES[1]]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("missing.yaml"));
}

/// Outcomes with only warnings (an Operator-owned
/// Deployment, durations held back) are shown as the server returns them:
/// on stderr, and as a line with an empty patch in `-o patches`.
#[test]
fn preview_shows_warning_only_outcomes() {
    let manifest = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: controller\n  namespace: knative-serving\n  ownerReferences:\n  - {apiVersion: operator.knative.dev/v1beta1, kind: KnativeServing, name: ks, uid: u}\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: controller}}\n  template:\n    metadata: {labels: {app: controller}}\n    spec:\n      containers: [{name: controller, image: img}]\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: config-leader-election, namespace: knative-serving}\ndata: {retryPeriod: 30s, buckets: \"5\"}\n";
    let dir = tempfile::tempdir().unwrap();
    let policy_path = dir.path().join("p.yaml");
    std::fs::write(
        &policy_path,
        "apiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\nmetadata: {name: p}\nspec:\n  targetNamespace: knative-serving\n  replicas: 3\n  leaderElection: {buckets: 5, renewDeadline: 20s}\n  governOperatorOwned: false\n",
    )
    .unwrap();
    let p = policy_path.to_str().unwrap();
    let operator = "deployment/controller: warning: left unchanged: owned by the Knative Operator's KnativeServing/ks";
    let held = "configmap/config-leader-election: warning: leader election durations not written: renew-deadline \"20s\" (policy) must be greater than retryPeriod \"30s\"";
    for format in ["yaml", "patches"] {
        let out = run_stdin(&["preview", "--policy", p, "-o", format], manifest);
        assert!(out.status.success(), "{}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains(operator) && err.contains(held),
            "{format}: {err}"
        );
    }
    let out = run_stdin(&["preview", "--policy", p, "-o", "patches"], manifest);
    let lines: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{}", stdout(&out));
    for (line, want) in lines.iter().zip([operator, held]) {
        assert_eq!(line["patch"], serde_json::json!([]), "{line}");
        assert!(
            line["changes"][0].as_str().unwrap().starts_with(want),
            "{line}"
        );
    }
}

/// `preview --operator-owner` shows what an Operator install gets: the
/// recommended policy changes the Operator's objects as it changes the
/// release's (the only difference is the ownerReference), and a policy
/// with `governOperatorOwned: false` changes none of them, saying why.
#[test]
fn preview_as_the_knative_operator_installs() {
    let policy = support::example_policy_path();
    let policy = policy.to_str().unwrap();
    let core = FIXTURES[0];
    let plain = run(&["preview", "--policy", policy, "-o", "json", core]);
    assert!(plain.status.success(), "{}", stderr(&plain));
    let owned = run(&[
        "preview",
        "--policy",
        policy,
        "--operator-owner",
        "KnativeServing/knative-serving",
        "-o",
        "json",
        core,
    ]);
    assert!(owned.status.success(), "{}", stderr(&owned));
    let items = |out: &std::process::Output| -> Vec<Value> {
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        v["items"].as_array().unwrap().clone()
    };
    let (plain, owned) = (items(&plain), items(&owned));
    assert_eq!(plain.len(), owned.len());
    for (mut p, o) in plain.into_iter().zip(owned) {
        if !o["metadata"]["annotations"]["knativeha.dev/created-for"].is_null() {
            // A budget the reconciler creates: its own, not the Operator's.
            assert_eq!(p, o);
            continue;
        }
        assert_eq!(
            o["metadata"]["ownerReferences"][0]["kind"], "KnativeServing",
            "{o}"
        );
        p["metadata"]["ownerReferences"] = o["metadata"]["ownerReferences"].clone();
        assert_eq!(p, o);
    }

    let dir = tempfile::tempdir().unwrap();
    let hands_off = dir.path().join("p.yaml");
    let text = std::fs::read_to_string(support::example_policy_path()).unwrap();
    std::fs::write(&hands_off, format!("{text}  governOperatorOwned: false\n")).unwrap();
    let out = run(&[
        "preview",
        "--policy",
        hands_off.to_str().unwrap(),
        "--operator-owner",
        "KnativeServing/knative-serving",
        "-o",
        "patches",
        core,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("deployment/controller: warning: left unchanged: owned by the Knative Operator's KnativeServing/knative-serving"),
        "{}",
        stderr(&out)
    );
    for line in stdout(&out).lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["patch"], serde_json::json!([]), "{line}");
    }

    let bad = run(&[
        "preview",
        "--policy",
        policy,
        "--operator-owner",
        "Deployment/x",
        core,
    ]);
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("expected KIND/NAME with KIND KnativeServing or KnativeEventing"),
        "{}",
        stderr(&bad)
    );
}

/// `preview` of a namespace whose HPAs are in its input takes them as all
/// of them: the activator without its HPA (taken out of the release) runs
/// the 1 it runs, and `minAvailable: 2` over that one pod, which would block
/// every drain, is not written, with the warning that says why.
#[test]
fn preview_judges_a_deployment_without_an_hpa_beside_the_others_at_one() {
    let docs: Vec<String> = support::fixture_objects()
        .into_iter()
        .filter(|o| {
            !(o["kind"] == "HorizontalPodAutoscaler" && o["metadata"]["name"] == "activator")
        })
        .map(|o| o.to_string())
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("p.yaml");
    std::fs::write(
        &policy,
        "apiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\nmetadata: {name: p}\nspec:\n  targetNamespace: knative-serving\n  replicas: 3\n  podDisruptionBudget: {minAvailable: 2}\n",
    )
    .unwrap();
    let out = support::run_stdin(
        &[
            "preview",
            "--policy-file",
            policy.to_str().unwrap(),
            "-o",
            "json",
            "-",
        ],
        &docs.join("\n---\n"),
    );
    assert!(out.status.success(), "{}", support::stderr(&out));
    let stderr = support::stderr(&out);
    assert!(
        stderr.contains(
            "poddisruptionbudget/activator-pdb: warning: spec.minAvailable 2 not written"
        ) && stderr.contains("deployment/activator has no HorizontalPodAutoscaler"),
        "{stderr}"
    );
}
