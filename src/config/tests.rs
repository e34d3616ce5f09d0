use std::time::Duration;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::Parser;

use super::*;

/// An environment given as maps.
#[derive(Clone, Debug, Default)]
struct MapEnv {
    vars: BTreeMap<String, String>,
    files: BTreeMap<PathBuf, String>,
    pid: u32,
}

impl MapEnv {
    /// No variables, no files, process id 1.
    fn new() -> MapEnv {
        MapEnv {
            pid: 1,
            ..MapEnv::default()
        }
    }

    fn with_var(mut self, key: &str, value: &str) -> MapEnv {
        self.vars.insert(key.to_string(), value.to_string());
        self
    }

    fn with_file(mut self, path: impl Into<PathBuf>, text: &str) -> MapEnv {
        self.files.insert(path.into(), text.to_string());
        self
    }
}

impl Env for MapEnv {
    fn var(&self, key: &str) -> Option<String> {
        self.vars.get(key).cloned()
    }

    fn read_file(&self, path: &Path) -> Option<String> {
        self.files.get(path).cloned()
    }

    fn exists(&self, path: &Path) -> bool {
        self.files.contains_key(path)
    }

    fn process_id(&self) -> u32 {
        self.pid
    }
}

#[derive(Parser, Debug)]
struct ReconcileCli {
    #[command(flatten)]
    r: ReconcileArgs,
}

fn parse_reconcile(args: &[&str]) -> Result<ReconcileArgs, String> {
    ReconcileCli::try_parse_from(std::iter::once("x").chain(args.iter().copied()))
        .map(|c| c.r)
        .map_err(|e| e.to_string())
}

fn parse_cli(args: &[&str]) -> Cli {
    Cli::try_parse_from(std::iter::once("knative-ha-webhook").chain(args.iter().copied()))
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

#[test]
fn durations() {
    let ok: &[(&str, Duration)] = &[
        ("0", Duration::ZERO),
        ("0s", Duration::ZERO),
        ("10s", Duration::from_secs(10)),
        ("1m30s", Duration::from_secs(90)),
        ("250ms", Duration::from_millis(250)),
        ("1.5s", Duration::from_millis(1500)),
        ("1h", Duration::from_secs(3600)),
        (" 10s ", Duration::from_secs(10)),
    ];
    for (text, want) in ok {
        assert_eq!(parse_duration(text).unwrap(), *want, "{text}");
    }
    for bad in ["", "10", "s", "10x", "-1s", "1..2s", "9999999999h"] {
        assert!(parse_duration(bad).is_err(), "{bad}");
    }
    let e = parse_duration("10").unwrap_err().to_string();
    assert!(e.contains("\"10\"") && e.contains("missing unit"), "{e}");
}

#[test]
fn a_refused_duration_flag_names_the_text_and_keeps_the_reason_typed() {
    let e = parse_duration(" 1h2 ").unwrap_err();
    assert_eq!(
        e,
        FlagValueError::Duration {
            text: " 1h2 ".into(),
            reason: crate::policy::duration::DurationError::NoUnit,
        }
    );
    assert_eq!(
        e.to_string(),
        "invalid duration \" 1h2 \": missing unit (use ns, us, ms, s, m or h)"
    );
}

#[test]
fn reconcile_flags_and_defaults() {
    let d = parse_reconcile(&[]).unwrap();
    assert!(!d.enabled && !d.dry_run && d.pod_templates);
    assert_eq!(d.interval, Duration::from_secs(600));
    assert_eq!(d.rate, 5.0);
    type Check = fn(&ReconcileArgs) -> bool;
    let cases: &[(&str, &[&str], Check)] = &[
        ("enabled", &["--reconcile"], |a| a.enabled),
        ("dry run", &["--reconcile-dry-run"], |a| a.dry_run),
        (
            "pod templates off",
            &["--reconcile-pod-templates=false"],
            |a| !a.pod_templates,
        ),
        (
            "pod templates bare flag",
            &["--reconcile-pod-templates"],
            |a| a.pod_templates,
        ),
        ("interval", &["--reconcile-interval", "1m30s"], |a| {
            a.interval == Duration::from_secs(90)
        }),
        ("rate", &["--reconcile-rate", "0.5"], |a| a.rate == 0.5),
    ];
    for (what, args, check) in cases {
        let a = parse_reconcile(args).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(check(&a), "{what}: {a:?}");
    }
    for bad in [
        &["--reconcile-rate", "0"][..],
        &["--reconcile-rate", "-1"],
        &["--reconcile-rate", "fast"],
        &["--reconcile-interval", "10"],
        &["--reconcile-pod-templates=maybe"],
    ] {
        assert!(parse_reconcile(bad).is_err(), "{bad:?} accepted");
    }
}

#[test]
fn reconcile_config_needs_a_namespace_only_when_enabled() {
    let none = MapEnv::new();
    let off = parse_reconcile(&[]).unwrap();
    assert!(reconcile_config(&off, None, &none).unwrap().is_none());
    let on = parse_reconcile(&["--reconcile", "--reconcile-dry-run"]).unwrap();
    let c = reconcile_config(&on, Some("khw"), &none)
        .unwrap()
        .expect("enabled");
    assert_eq!(c.lease.namespace, "khw");
    assert_eq!(c.lease.name, crate::reconcile::LEASE_NAME);
    assert!(c.dry_run);
    assert!(matches!(
        reconcile_config(&on, None, &none),
        Err(ConfigError::ReconcileNoNamespace)
    ));
    // In a pod: the service account's namespace file.
    let pod = MapEnv::new().with_file(SA_NAMESPACE_FILE, "knative-ha\n");
    let c = reconcile_config(&on, None, &pod).unwrap().expect("enabled");
    assert_eq!(c.lease.namespace, "knative-ha");
    // An empty flag value falls back to it too; a blank file is no namespace.
    let c = reconcile_config(&on, Some(""), &pod).unwrap().unwrap();
    assert_eq!(c.lease.namespace, "knative-ha");
    let blank = MapEnv::new().with_file(SA_NAMESPACE_FILE, " \n");
    assert!(reconcile_config(&on, None, &blank).is_err());
}

#[test]
fn identity_is_the_pod_name_else_host_and_pid() {
    let env = MapEnv {
        pid: 42,
        ..MapEnv::new()
    };
    assert_eq!(identity(&env), "unknown-host-42");
    let env = env.with_file(HOSTNAME_FILE, "node-a\n");
    assert_eq!(identity(&env), "node-a-42");
    let env = env.with_var("HOSTNAME", "box");
    assert_eq!(identity(&env), "box-42");
    let env = env.with_var("POD_NAME", "");
    assert_eq!(identity(&env), "box-42");
    let env = env.with_var("POD_NAME", "webhook-0");
    assert_eq!(identity(&env), "webhook-0");
}

#[test]
fn serve_config_from_flags_and_environment() {
    let cli = parse_cli(&["serve", "--self-signed", "/tmp/ca.pem", "--reconcile"]);
    let env = MapEnv::new()
        .with_file(SA_NAMESPACE_FILE, "khw")
        .with_var("POD_NAME", "webhook-1");
    let CommandConfig::Serve(serve) = parse(cli, &env).unwrap() else {
        panic!("not serve");
    };
    let server = &serve.app;
    assert!(matches!(
        &server.policy,
        crate::app::PolicySource::Cluster { namespace } if namespace == "khw"
    ));
    assert_eq!(server.shutdown_delay, Duration::from_secs(10));
    assert_eq!(server.pod_name.as_deref(), Some("webhook-1"));
    let reconcile = server.reconcile.as_ref().expect("reconcile on");
    assert_eq!(reconcile.lease.identity, "webhook-1");
    assert_eq!(serve.log_format, crate::telemetry::LogFormat::Json);

    let no_ns = parse_cli(&["serve", "--self-signed", "/tmp/ca.pem"]);
    assert!(matches!(
        parse(no_ns, &MapEnv::new()),
        Err(ConfigError::NoNamespace)
    ));
    let no_cert = parse_cli(&["serve", "--policy-file", "p.yaml"]);
    assert!(matches!(
        parse(no_cert, &env),
        Err(ConfigError::NoCertificate)
    ));
}

#[test]
fn kube_settings_follow_kubectl() {
    let args = KubeconfigArgs::default();
    let home = MapEnv::new().with_var("HOME", "/home/me");
    let s = kube_settings(&args, None, &home);
    assert_eq!(
        s.default_path.as_deref(),
        Some(std::path::Path::new("/home/me/.kube/config"))
    );
    assert!(!s.default_exists && !s.in_cluster && s.kubeconfig_env.is_none());
    let s = kube_settings(
        &args,
        None,
        &home
            .clone()
            .with_file("/home/me/.kube/config", "")
            .with_var("KUBECONFIG", "")
            .with_var("KUBERNETES_SERVICE_HOST", "10.0.0.1"),
    );
    assert!(s.default_exists && s.in_cluster && s.kubeconfig_env.is_none());
    let s = kube_settings(&args, None, &home.with_var("KUBECONFIG", "/a:/b"));
    assert_eq!(s.kubeconfig_env.as_deref(), Some("/a:/b"));
}

#[test]
fn serve_finds_the_cluster_only_when_it_needs_one() {
    // A policy file alone: no cluster.
    assert!(serve_with(&[]).unwrap().kube.is_none());
    // The reconciler needs one, found through the same flags as audit's.
    let args = [
        "serve",
        "--self-signed",
        "/tmp/ca.pem",
        "--policy-file",
        "p.yaml",
        "--reconcile",
        "--webhook-namespace",
        "khw",
        "--kubeconfig",
        "/k/config",
        "--context",
        "prod",
    ];
    let Ok(CommandConfig::Serve(serve)) = parse(parse_cli(&args), &MapEnv::new()) else {
        panic!("serve parses");
    };
    let kube = serve.kube.expect("the reconciler needs the cluster");
    assert_eq!(
        kube.kubeconfig.as_deref(),
        Some(std::path::Path::new("/k/config"))
    );
    assert_eq!(kube.context.as_deref(), Some("prod"));
    assert_eq!(
        kube.request_timeout, None,
        "serve's watches are long requests"
    );
    // Policies from the cluster need one too.
    let args = [
        "serve",
        "--self-signed",
        "/tmp/ca.pem",
        "--webhook-namespace",
        "khw",
    ];
    let Ok(CommandConfig::Serve(serve)) = parse(parse_cli(&args), &MapEnv::new()) else {
        panic!("serve parses");
    };
    assert!(serve.kube.is_some());
}

/// `serve`'s configuration, or the error, for these `serve` flags.
fn serve_with(flags: &[&str]) -> Result<ServeConfig> {
    let mut args = vec![
        "serve",
        "--self-signed",
        "/tmp/ca.pem",
        "--policy-file",
        "p.yaml",
    ];
    args.extend_from_slice(flags);
    match parse(parse_cli(&args), &MapEnv::new()) {
        Ok(CommandConfig::Serve(serve)) => Ok(*serve),
        Ok(other) => panic!("not serve: {other:?}"),
        Err(e) => Err(e),
    }
}

/// The flags' defaults are `app::Config::new`'s, and a default duration
/// is written as the flag reads it.
#[test]
fn serve_flag_defaults_are_the_app_defaults() {
    let serve = serve_with(&[]).unwrap().app;
    let base = crate::app::Config::new(serve.tls.clone(), serve.policy.clone());
    assert_eq!(serve.listen, base.listen);
    assert_eq!(serve.metrics_listen, base.metrics_listen);
    assert_eq!(serve.shutdown_delay, base.shutdown_delay);
    assert_eq!(serve.on_error, base.on_error);
    for d in [
        Duration::ZERO,
        Duration::from_secs(10),
        Duration::from_millis(1500),
        Duration::from_nanos(7),
    ] {
        assert_eq!(parse_duration(&duration_text(d)).unwrap(), d, "{d:?}");
    }
}

#[test]
fn governed_namespaces_refuse_empty_entries_and_non_labels() {
    // An empty entry ('' or ',') must be refused, not read as "every
    // namespace" (which would govern, and log, "*").
    let unset = serve_with(&[]).unwrap();
    assert_eq!(unset.app.governed, crate::scope::AllowedNamespaces::all());
    let ok = serve_with(&["--governed-namespaces", "knative-serving, kourier-system"]).unwrap();
    assert_eq!(ok.app.governed.display(), "knative-serving,kourier-system");
    for (value, bad) in [
        ("", ""),
        (",", ""),
        ("knative-serving,", ""),
        ("knative-serving,,kourier-system", ""),
        (" ", ""),
        ("Knative-Serving", "Knative-Serving"),
        ("knative_serving", "knative_serving"),
        ("*", "*"),
        ("serving-", "serving-"),
    ] {
        let err = serve_with(&["--governed-namespaces", value])
            .expect_err(&format!("{value:?} must be refused"));
        let text = err.to_string();
        assert!(
            text.contains("--governed-namespaces") && text.contains(&format!("{bad:?}")),
            "{value:?}: {text}"
        );
    }
    let long = "a".repeat(64);
    let err = serve_with(&["--governed-namespaces", &long]).unwrap_err();
    assert!(err.to_string().contains("63"), "{err}");
}

#[test]
fn listen_addresses_take_the_forms_users_write() {
    let ok: &[(&str, &str)] = &[
        ("0.0.0.0:8443", "0.0.0.0:8443"),
        ("127.0.0.1:9443", "127.0.0.1:9443"),
        ("[::]:8443", "[::]:8443"),
        ("[::1]:8443", "[::1]:8443"),
        (":8443", "0.0.0.0:8443"),
        ("localhost:8443", "127.0.0.1:8443"),
        ("LOCALHOST:9090", "127.0.0.1:9090"),
    ];
    for (text, want) in ok {
        assert_eq!(parse_listen(text).unwrap().to_string(), *want, "{text}");
    }
    let bad: &[(&str, &str)] = &[
        (
            "example.com:8443",
            "a host name other than localhost is not looked up; give an IP address",
        ),
        ("8443", "missing the port"),
        ("localhost", "missing the port"),
        (":http", "invalid port \"http\""),
        ("127.0.0.1:99999", "invalid port \"99999\""),
    ];
    for (text, want) in bad {
        let err = parse_listen(text).unwrap_err().to_string();
        assert!(err.contains(want), "{text}: {err}");
        assert!(err.contains(text), "{text}: {err}");
    }
    let cli = parse_cli(&[
        "serve",
        "--self-signed",
        "/tmp/ca.pem",
        "--policy-file",
        "p.yaml",
        "--listen",
        "localhost:8443",
        "--metrics-listen",
        ":9090",
    ]);
    let CommandConfig::Serve(serve) = parse(cli, &MapEnv::new()).unwrap() else {
        panic!("not serve");
    };
    assert_eq!(serve.app.listen.to_string(), "127.0.0.1:8443");
    assert_eq!(serve.app.metrics_listen.to_string(), "0.0.0.0:9090");
}

/// A deleted policy changes nothing unless `--undo-unclaimed` asks for the
/// undo, which admission and the reconciler then both make.
#[test]
fn undo_unclaimed_is_off_by_default_and_reaches_admission_and_the_reconciler() {
    let reconcile = ["--reconcile", "--webhook-namespace", "khw"];
    let off = serve_with(&reconcile).unwrap();
    assert!(!off.app.undo_unclaimed, "admission undoes by default");
    assert!(
        !off.app.reconcile.expect("reconcile on").undo_unclaimed,
        "the reconciler undoes by default"
    );
    let on = serve_with(&[&reconcile[..], &["--undo-unclaimed"]].concat()).unwrap();
    assert!(on.app.undo_unclaimed);
    assert!(on.app.reconcile.expect("reconcile on").undo_unclaimed);
    let without_reconcile = serve_with(&["--undo-unclaimed"]).unwrap();
    assert!(without_reconcile.app.undo_unclaimed && without_reconcile.app.reconcile.is_none());
}

/// The flags tables of docs/server.md and docs/reconcile.md list `serve`'s
/// flags, each with the environment variable it reads: every flag, and
/// only those.
#[test]
fn the_docs_flag_tables_are_serves_flags() {
    use clap::CommandFactory;
    use std::collections::{BTreeMap, BTreeSet};
    let cli = Cli::command();
    let serve = cli
        .get_subcommands()
        .find(|c| c.get_name() == "serve")
        .expect("serve");
    let flags: BTreeMap<String, Option<String>> = serve
        .get_arguments()
        .filter_map(|a| {
            let env = a.get_env().map(|e| e.to_string_lossy().into_owned());
            Some((format!("--{}", a.get_long()?), env))
        })
        .filter(|(long, _)| long != "--help")
        .collect();
    let docs = [
        include_str!("../../docs/server.md"),
        include_str!("../../docs/reconcile.md"),
    ];
    // (flag, its env cell) of every table row naming a flag.
    let rows: Vec<(String, &str)> = docs
        .iter()
        .flat_map(|d| d.lines())
        .filter_map(|l| {
            let rest = l.strip_prefix("| `--")?;
            let (flag, rest) = rest.split_once(" | ")?;
            let flag = flag.split(['`', ' ']).next()?;
            Some((format!("--{flag}"), rest.split(" | ").next()?))
        })
        .collect();
    let documented: BTreeSet<&String> = rows.iter().map(|(f, _)| f).collect();
    assert_eq!(
        documented,
        flags.keys().collect(),
        "docs' flag tables (left) against serve's flags (right)"
    );
    for (flag, cell) in &rows {
        if let Some(Some(env)) = flags.get(flag) {
            assert!(
                cell.contains(&format!("`{env}`")),
                "{flag}: the docs say {cell:?}, serve reads {env}"
            );
        }
    }
}
