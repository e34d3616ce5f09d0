//! The forms a policy file comes in, through the built binary: what `kubectl get highavailabilitypolicies -o yaml`
//! writes (a `kind: List`) is checked item by item; a policy ConfigMap is a
//! policy file for `preview`, `audit` and `serve` as it is for `check`; a
//! file that cannot be read gets the reason; workload and exclude names that
//! name nothing get a warning with the near name.

use crate::support;

use support::{FIXTURES, repo_path, run, stderr, stdout};

const POLICY: &str = "examples/policy.yaml";

fn write(dir: &tempfile::TempDir, name: &str, text: &[u8]) -> String {
    let p = dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

/// `text` indented by `n` spaces, the first line prefixed with `first`.
fn indent(text: &str, n: usize, first: &str) -> String {
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            if i == 0 {
                format!("{}{first}{l}\n", " ".repeat(n - first.len()))
            } else {
                format!("{}{l}\n", " ".repeat(n))
            }
        })
        .collect()
}

/// A policy as the API server returns it: server metadata and a status.
fn served_policy(name: &str, namespace: &str, replicas: u32) -> String {
    format!(
        "apiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\nmetadata:\n  annotations:\n    kubectl.kubernetes.io/last-applied-configuration: '{{}}'\n  creationTimestamp: \"2026-12-01T10:00:00Z\"\n  generation: 2\n  name: {name}\n  resourceVersion: \"4711\"\n  uid: 0b6e8f2e-1111-2222-3333-444455556666\nspec:\n  targetNamespace: {namespace}\n  replicas: {replicas}\nstatus:\n  observedGeneration: 2\n  conditions:\n  - {{type: Ready, status: \"True\", reason: Valid, message: in force, lastTransitionTime: \"2026-12-01T10:00:01Z\", observedGeneration: 2}}\n"
    )
}

/// What `kubectl get highavailabilitypolicies -o yaml` prints.
fn kubectl_list(items: &[String]) -> String {
    let items: String = match items {
        [] => " []\n".to_string(),
        _ => "\n".to_string() + &items.iter().map(|i| indent(i, 2, "- ")).collect::<String>(),
    };
    format!("apiVersion: v1\nitems:{items}kind: List\nmetadata:\n  resourceVersion: \"\"\n")
}

fn policy_configmap(namespace: &str) -> String {
    let policy = std::fs::read_to_string(repo_path(POLICY))
        .unwrap()
        .replace("knative-serving", namespace);
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ha\n  namespace: khw-system\n  labels: {{knativeha.dev/policy: \"true\"}}\ndata:\n  policy.yaml: |\n{}",
        indent(&policy, 4, "")
    )
}

// ---- check expands Lists ----------------------------------------------------

#[test]
fn check_takes_what_kubectl_get_prints() {
    let dir = tempfile::tempdir().unwrap();
    let list = write(
        &dir,
        "policies.yaml",
        kubectl_list(&[
            served_policy("serving", "knative-serving", 3),
            served_policy("kourier", "kourier-system", 2),
        ])
        .as_bytes(),
    );
    let out = run(&["check", &list]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("policies.yaml: document 1, item 1: valid (policy serving for namespace knative-serving)"),
        "{text}"
    );
    assert!(
        text.contains(
            "policies.yaml: document 1, item 2: valid (policy kourier for namespace kourier-system)"
        ),
        "{text}"
    );

    // A typed list, and errors that name the item.
    let typed = write(
        &dir,
        "typed.yaml",
        kubectl_list(&[
            served_policy("serving", "knative-serving", 3),
            served_policy("bad", "kourier-system", 300),
            served_policy("twice", "knative-serving", 2),
        ])
        .replace("kind: List", "kind: HighAvailabilityPolicyList")
        .replace("apiVersion: v1\n", "apiVersion: knativeha.dev/v1alpha1\n")
        .as_bytes(),
    );
    let out = run(&["check", &typed]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let err = stderr(&out);
    assert!(
        err.contains(
            "typed.yaml: document 1, item 2: spec.replicas: must be between 1 and 100, got 300"
        ),
        "{err}"
    );
    assert!(
        err.contains("typed.yaml: document 1, item 3: spec.targetNamespace: \"knative-serving\" is already governed by policy \"serving\""),
        "{err}"
    );

    // No policies in the cluster: an empty List says so.
    let empty = write(&dir, "empty.yaml", kubectl_list(&[]).as_bytes());
    let out = run(&["check", &empty]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("empty.yaml: no policy document found (document 1 is an empty List)"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn preview_and_serve_take_the_list_too() {
    let dir = tempfile::tempdir().unwrap();
    let list = write(
        &dir,
        "policies.yaml",
        kubectl_list(&[served_policy("serving", "knative-serving", 4)]).as_bytes(),
    );
    let out = run(&[
        "preview",
        "--policy-file",
        &list,
        "-o",
        "patches",
        FIXTURES[0],
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("spec.replicas unset -> 4 (policy serving)"),
        "{}",
        stdout(&out)
    );
    let (_, snapshot) =
        knative_ha_webhook::sources::file::load(std::path::Path::new(&list)).unwrap();
    assert_eq!(snapshot.policies["knative-serving"].spec.replicas, Some(4));
}

// ---- the ConfigMap form everywhere --------------------------------------------

#[test]
fn a_policy_configmap_is_a_policy_file_for_preview_audit_and_serve() {
    let dir = tempfile::tempdir().unwrap();
    let cm = write(
        &dir,
        "cm.yaml",
        policy_configmap("knative-serving").as_bytes(),
    );

    let out = run(&[
        "preview",
        "--policy-file",
        &cm,
        "-o",
        "patches",
        FIXTURES[0],
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("spec.replicas unset -> 3 (policy serving)"),
        "{}",
        stdout(&out)
    );

    // audit reads the policy before it looks for a cluster: the error is the cluster's.
    let out = run(&[
        "audit",
        "--policy-file",
        &cm,
        "--kubeconfig",
        dir.path().join("no-kubeconfig").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(!err.contains("policy"), "{err}");
    assert!(err.contains("kubeconfig"), "{err}");

    // serve --policy-file reads its file with sources::file::load.
    let (_, snapshot) = knative_ha_webhook::sources::file::load(std::path::Path::new(&cm)).unwrap();
    assert_eq!(snapshot.policies["knative-serving"].name, "serving");

    // An unlabelled ConfigMap is refused everywhere with check's reason.
    let unlabelled = write(
        &dir,
        "unlabelled.yaml",
        policy_configmap("knative-serving")
            .replace("  labels: {knativeha.dev/policy: \"true\"}\n", "")
            .as_bytes(),
    );
    let out = run(&["preview", "--policy-file", &unlabelled, FIXTURES[0]]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(
            "unlabelled.yaml: document 1: ConfigMap khw-system/ha: metadata.labels: missing knativeha.dev/policy=true"
        ),
        "{}",
        stderr(&out)
    );
    let err =
        knative_ha_webhook::sources::file::load(std::path::Path::new(&unlabelled)).unwrap_err();
    let err = std::iter::successors(Some(&err as &dyn std::error::Error), |e| e.source())
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join(": ");
    assert!(err.contains("knativeha.dev/policy=true"), "{err}");

    // Errors inside the ConfigMap's document name the ConfigMap and the key.
    let bad = write(
        &dir,
        "bad-cm.yaml",
        policy_configmap("knative-serving")
            .replace("replicas: 3", "replicas: 0")
            .as_bytes(),
    );
    for args in [
        vec!["check", bad.as_str()],
        vec!["preview", "--policy-file", bad.as_str(), FIXTURES[0]],
    ] {
        let out = run(&args);
        assert!(!out.status.success());
        assert!(
            stderr(&out).contains(
                "bad-cm.yaml: document 1: ConfigMap khw-system/ha: data.policy.yaml: spec.replicas: must be between 1 and 100, got 0"
            ),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

// ---- why a file cannot be read ------------------------------------------------

#[test]
fn a_file_that_cannot_be_read_gets_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir
        .path()
        .join("missing.yaml")
        .to_str()
        .unwrap()
        .to_string();
    let directory = dir.path().to_str().unwrap().to_string();
    let latin1 = write(
        &dir,
        "latin1.yaml",
        b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: caf\xe9}\n",
    );
    let cases = [
        (&missing, "cannot read file: no such file"),
        (&directory, "cannot read file: it is a directory"),
        (
            &latin1,
            "cannot read file: not UTF-8 (an invalid byte at line 3, column 21)",
        ),
    ];
    for (file, reason) in cases {
        for args in [
            vec!["check", file.as_str()],
            vec!["preview", "--policy-file", file.as_str(), FIXTURES[0]],
            vec!["preview", "--policy-file", POLICY, file.as_str()],
        ] {
            let out = run(&args);
            assert!(!out.status.success(), "{args:?}");
            let err = stderr(&out);
            assert!(
                err.contains(&format!("{file}: {reason}")),
                "{args:?}: {err}"
            );
        }
    }
}

// ---- names that name nothing --------------------------------------------------

#[test]
fn workload_and_exclude_names_that_name_nothing_get_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(repo_path(POLICY))
        .unwrap()
        .replace("- name: activator", "- name: activtor")
        + "  exclude: [domain-mapping, my-own-thing]\n";
    let typo = write(&dir, "typo.yaml", text.as_bytes());

    // check: against the Deployments Knative ships; still valid (exit 0).
    let out = run(&["check", &typo]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("typo.yaml: document 1: warning: spec.workloads[0].name: \"activtor\" is not the name of a Knative Deployment (did you mean \"activator\"?)"),
        "{err}"
    );
    assert!(
        err.contains("typo.yaml: document 1: warning: spec.exclude[1]: \"my-own-thing\" is not the name of a Knative Deployment"),
        "{err}"
    );
    assert!(!err.contains("domain-mapping"), "{err}");
    assert_eq!(err.lines().count(), 2, "{err}");

    // preview: a name that is neither in the manifests nor a Knative Deployment.
    let mine = write(
        &dir,
        "mine.yaml",
        b"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: my-own-thing, namespace: knative-serving}\nspec:\n  selector: {matchLabels: {app: mine}}\n  template:\n    metadata: {labels: {app: mine}}\n    spec: {containers: [{name: c, image: x}]}\n",
    );
    let out = run(&[
        "preview",
        "--policy-file",
        &typo,
        "-o",
        "patches",
        FIXTURES[0],
        &mine,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("warning: policy serving: spec.workloads[0].name: \"activtor\" matches no Deployment in namespace knative-serving of the manifests and is not the name of a Knative Deployment (did you mean \"activator\"?)"),
        "{err}"
    );
    assert!(!err.contains("my-own-thing"), "{err}");

    // The example policy names only what Knative ships: no warning.
    let out = run(&["check", POLICY]);
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
}
