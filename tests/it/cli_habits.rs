//! The command line in kubectl's habits, through
//! the built binary: `kind: List` input, `check` over several files and the
//! ConfigMap form with every error in one run, `-o yaml|json`, one name per
//! flag (old spellings kept), and errors in the user's words.

use crate::support;

use serde_json::Value;
use support::{FIXTURES, bin, repo_path, run, run_stdin, stderr, stdout};

const POLICY: &str = "examples/policy.yaml";

fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

const CONTROLLER: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: controller, namespace: knative-serving}\nspec:\n  replicas: 1\n  selector: {matchLabels: {app: controller}}\n  template:\n    metadata: {labels: {app: controller}}\n    spec: {containers: [{name: c, image: x}]}\n";

fn list_of_controller() -> String {
    // what `kubectl get deploy -n knative-serving controller -o yaml` prints
    // for several objects: a v1 List, items indented under `items:`
    let item: String = CONTROLLER
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i == 0 {
                format!("- {l}\n")
            } else {
                format!("  {l}\n")
            }
        })
        .collect();
    format!("apiVersion: v1\nkind: List\nmetadata: {{resourceVersion: \"\"}}\nitems:\n{item}")
}

// ---- 7. preview expands lists --------------------------------------------

#[test]
fn preview_expands_kind_list_and_typed_lists() {
    let list = list_of_controller();
    let out = run_stdin(
        &["preview", "--policy-file", POLICY, "-o", "patches"],
        &list,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("deployment/controller: spec.replicas 1 -> 3 (policy serving)"),
        "List items are previewed: {text:?}"
    );

    // A typed list straight from the API (items without kind/apiVersion).
    let typed = "apiVersion: apps/v1\nkind: DeploymentList\nitems:\n- metadata: {name: controller, namespace: knative-serving}\n  spec: {replicas: 1}\n";
    let out = run_stdin(
        &["preview", "--policy-file", POLICY, "-o", "patches"],
        typed,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let line: Value = serde_json::from_str(stdout(&out).trim()).expect("one JSON line");
    assert_eq!(line["kind"], "Deployment");
    assert_eq!(line["apiVersion"], "apps/v1");

    // YAML output: the items as documents, mutated.
    let out = run_stdin(&["preview", "--policy-file", POLICY], &list);
    assert!(out.status.success(), "{}", stderr(&out));
    // The Deployment, then the budget the reconciler would create for it.
    let docs: Vec<Value> = serde_saphyr::from_multiple(&stdout(&out)).expect("YAML documents");
    assert_eq!(docs[1]["metadata"]["name"], "controller-pdb");
    let doc = &docs[0];
    assert_eq!(doc["kind"], "Deployment");
    assert_eq!(doc["spec"]["replicas"], 3);
}

// ---- 8. check ------------------------------------------------------------

#[test]
fn check_takes_several_files_and_the_configmap_form() {
    let dir = tempfile::tempdir().unwrap();
    let policy = std::fs::read_to_string(repo_path(POLICY))
        .unwrap()
        .replace("knative-serving", "other-ns");
    let indented: String = policy.lines().map(|l| format!("    {l}\n")).collect();
    let cm = write(
        &dir,
        "cm.yaml",
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ha\n  namespace: khw-system\n  labels: {{knativeha.dev/policy: \"true\"}}\ndata:\n  policy.yaml: |\n{indented}"
        ),
    );
    let out = run(&["check", POLICY, &cm]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("examples/policy.yaml: valid (policy serving for namespace knative-serving)"),
        "{text}"
    );
    assert!(
        text.contains(
            "cm.yaml: valid (policy serving for namespace other-ns, ConfigMap khw-system/ha)"
        ),
        "{text}"
    );

    // Unlabelled: the webhook would never read it.
    let unlabelled = write(
        &dir,
        "unlabelled.yaml",
        &std::fs::read_to_string(&cm)
            .unwrap()
            .replace("  labels: {knativeha.dev/policy: \"true\"}\n", ""),
    );
    let out = run(&["check", &unlabelled]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("knativeha.dev/policy=true"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn check_reports_every_error_of_every_file_in_one_run() {
    let dir = tempfile::tempdir().unwrap();
    let both = write(
        &dir,
        "both.yaml",
        "apiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\nmetadata: {name: x}\nspec:\n  targetNamespace: a\n  replicas: 300\n  workloads:\n  - name: controller\n    replcas: 2\n",
    );
    let other = write(
        &dir,
        "other.yaml",
        "# first\n---\napiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\nmetadata: {name: other}\nspec: {targetNamespace: b, leaderElection: {buckets: 12}}\n",
    );
    let out = run(&["check", &both, &other]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("both.yaml: document 1: spec.workloads[0].replcas: unknown field \"replcas\""),
        "{err}"
    );
    assert!(
        err.contains("both.yaml: document 1: spec.replicas: must be between 1 and 100, got 300"),
        "{err}"
    );
    assert!(
        err.contains("other.yaml: document 1: spec.leaderElection.buckets"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 3, "{err}");
}

// ---- 9. output formats and flag names -------------------------------------

#[test]
fn preview_and_crd_print_json_and_yaml() {
    let out = run(&[
        "preview",
        "--policy-file",
        POLICY,
        "-o",
        "json",
        FIXTURES[0],
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let list: Value = serde_json::from_str(&stdout(&out)).expect("JSON");
    assert_eq!(list["kind"], "List");
    let controller = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["kind"] == "Deployment" && i["metadata"]["name"] == "controller")
        .expect("controller");
    assert_eq!(controller["spec"]["replicas"], 3);

    // One object: the object itself, as kubectl prints it (the activator:
    // HPA-scaled, so no budget is created beside it).
    let out = run_stdin(
        &["preview", "--policy-file", POLICY, "-o", "json"],
        &CONTROLLER.replace("controller", "activator"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let one: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(one["kind"], "Deployment");

    let yaml = run(&["crd"]);
    let yaml_flag = run(&["crd", "-o", "yaml"]);
    assert_eq!(yaml.stdout, yaml_flag.stdout);
    let json = run(&["crd", "-o", "json"]);
    assert!(json.status.success(), "{}", stderr(&json));
    let from_json: Value = serde_json::from_str(&stdout(&json)).unwrap();
    let from_yaml: Value = serde_saphyr::from_str(&stdout(&yaml)).unwrap();
    assert_eq!(from_json, from_yaml);
}

#[test]
fn policy_file_is_the_name_and_policy_still_works() {
    let a = run(&[
        "preview",
        "--policy-file",
        POLICY,
        "-o",
        "patches",
        FIXTURES[0],
    ]);
    let b = run(&["preview", "--policy", POLICY, "-o", "patches", FIXTURES[0]]);
    assert!(a.status.success(), "{}", stderr(&a));
    assert!(!a.stdout.is_empty());
    assert_eq!(a.stdout, b.stdout);
    for cmd in ["preview", "audit"] {
        let help = stdout(&run(&[cmd, "--help"]));
        assert!(help.contains("--policy-file"), "{cmd}: {help}");
        assert!(!help.contains("--policy "), "{cmd}: alias hidden: {help}");
    }
}

#[test]
fn serve_calls_its_own_namespace_webhook_namespace() {
    let help = stdout(&run(&["serve", "--help"]));
    assert!(help.contains("--webhook-namespace"), "{help}");
    assert!(!help.contains("--namespace "), "{help}");
    // Both spellings parse (the run then stops at the missing certificate).
    for flag in ["--webhook-namespace", "--namespace"] {
        let out = bin()
            .args(["serve", flag, "khw-system"])
            .env_remove("KHW_TLS_CERT")
            .env_remove("KHW_SELF_SIGNED")
            .output()
            .unwrap();
        assert!(
            stderr(&out).contains("no certificate"),
            "{flag}: {}",
            stderr(&out)
        );
    }
    // Without a namespace the message names the new flag.
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    let out = bin()
        .args(["serve", "--self-signed", ca.to_str().unwrap()])
        .env_remove("POD_NAMESPACE")
        .env_remove("KHW_POLICY_FILE")
        .output()
        .unwrap();
    assert!(
        stderr(&out).contains("pass --webhook-namespace or set POD_NAMESPACE"),
        "{}",
        stderr(&out)
    );
}

// ---- 10. errors in the user's words ---------------------------------------

#[test]
fn yaml_errors_name_the_file_line_without_library_jargon() {
    let dir = tempfile::tempdir().unwrap();
    // Two objects without `---` between them: the second `apiVersion` is on
    // line 8 of the file (line 4 of the second document).
    let missing_marker = write(
        &dir,
        "missing-marker.yaml",
        &format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: a}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: b}}\n{CONTROLLER}"
        ),
    );
    let out = run(&["preview", "--policy-file", POLICY, &missing_marker]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("missing-marker.yaml: document 2"), "{err}");
    assert!(
        err.contains("line 8"),
        "file line, not document line: {err}"
    );
    assert_eq!(
        err.matches("\"apiVersion\" appears twice").count(),
        1,
        "{err}"
    );
    assert!(!err.contains("DuplicateKeyPolicy"), "{err}");

    // An empty key where a name is expected.
    let null_key = write(
        &dir,
        "null-key.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  ~: b\n",
    );
    for args in [
        vec!["preview", "--policy-file", POLICY, null_key.as_str()],
        vec!["check", null_key.as_str()],
    ] {
        let out = run(&args);
        assert!(!out.status.success());
        let err = stderr(&out);
        assert!(err.contains("null-key.yaml"), "{err}");
        assert!(err.contains("line 5"), "{err}");
        assert!(!err.contains("Option<String>"), "{err}");
        assert!(!err.contains("deserialize"), "{err}");
    }
}

#[test]
fn no_kubeconfig_is_one_sentence_with_the_fix() {
    let home = tempfile::tempdir().unwrap();
    let out = bin()
        .args(["audit", "--policy-file", POLICY])
        .env("HOME", home.path())
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no kubeconfig found"), "{err}");
    assert!(
        err.contains("pass --kubeconfig FILE or set KUBECONFIG"),
        "{err}"
    );
    assert!(!err.contains("infer"), "{err}");
}
