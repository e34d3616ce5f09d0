//! Engine benchmark: the cost of one admission per governed object of the
//! Knative v1.23.0 manifests under `examples/policy.yaml`, plus synthetic
//! 100 KiB and 1 MiB ConfigMaps so the growth with object size is visible,
//! each in the governed namespace and in an ungoverned one.
//!
//! - `mutate`: `engine::outcome` on an already parsed object (the engine alone);
//! - `parse_and_mutate`: JSON bytes -> `serde_json::Value` -> `engine::outcome`
//!   (what the request path pays per object besides TLS and HTTP);
//! - `mutate_again`: the second admission of an object that already carries
//!   the patch (the idempotent path of a re-apply).
//!
//! Run: `cargo bench --bench engine` (add `-- mutate` to filter).

use std::sync::LazyLock;

use knative_ha_webhook::engine::{self, Answering, Input, Operation, Snapshot};
use knative_ha_webhook::policy::Policy;
use serde_json::Value;
use testkit::corpus;

struct Case {
    namespace: &'static str,
    object: Value,
    bytes: Vec<u8>,
    patched: Value,
}

static POLICY: LazyLock<Policy> = LazyLock::new(|| {
    Policy::from_yaml(corpus::POLICY_YAML).expect("examples/policy.yaml is valid")
});

// The policy, and the HPAs of 2-serving-core.yaml (they target activator
// and webhook).
static SNAPSHOT: LazyLock<Snapshot> = LazyLock::new(|| corpus::governing(&POLICY));

fn outcome(input: &Input<'_>) -> engine::Result<engine::Mutation> {
    engine::outcome(Answering::Governed(&SNAPSHOT), input).map(|o| o.mutation)
}

const UNGOVERNED_CASES: &[&str] = &[
    "deployment/controller",
    "configmap/config-leader-election",
    "configmap/synthetic-100KiB",
    "configmap/synthetic-1MiB",
];

static CASES: LazyLock<Vec<(String, Case)>> = LazyLock::new(|| {
    // Every governed Deployment, HPA and PDB; of the ConfigMaps, the one the
    // policy edits and one it leaves alone.
    let mut objects: Vec<(String, Value)> = corpus::governed_objects()
        .into_iter()
        .filter(|(l, _)| {
            !l.starts_with("configmap/")
                || l == "configmap/config-leader-election"
                || l == "configmap/config-deployment"
        })
        .collect();
    objects.push((
        "configmap/synthetic-100KiB".to_string(),
        corpus::big_configmap(corpus::GOVERNED, "synthetic-100k", 100 * 1024),
    ));
    objects.push((
        "configmap/synthetic-1MiB".to_string(),
        corpus::big_configmap(corpus::GOVERNED, "synthetic-1m", 1024 * 1024),
    ));
    // A governed Deployment that the engine does patch, carrying 1 MiB of
    // annotation: the cost of copying a large object the policy changes.
    let mut fat = corpus::controller_deployment();
    fat["metadata"]["annotations"]["bench/padding"] = Value::String("x".repeat(1024 * 1024));
    objects.push(("deployment/controller+1MiB-annotation".to_string(), fat));
    let mut cases = Vec::new();
    for (namespace, prefix) in [(corpus::GOVERNED, ""), (corpus::UNGOVERNED, "ungoverned:")] {
        for (label, obj) in &objects {
            // Outside the governed namespace the engine only has to say no:
            // a few representatives of each size are enough.
            if namespace == corpus::UNGOVERNED && !UNGOVERNED_CASES.contains(&label.as_str()) {
                continue;
            }
            let object = corpus::in_namespace(obj, namespace);
            let bytes = serde_json::to_vec(&object).expect("serialisable");
            let input = Input {
                operation: Operation::Create,
                namespace,
                object: &object,
            };
            let mutation = outcome(&input).unwrap_or_else(|e| panic!("{label}: engine error {e}"));
            let mut patched = object.clone();
            json_patch::patch(&mut patched, &mutation.patch)
                .unwrap_or_else(|e| panic!("{label}: patch does not apply: {e}"));
            cases.push((
                format!("{prefix}{label}"),
                Case {
                    namespace,
                    object,
                    bytes,
                    patched,
                },
            ));
        }
    }
    cases
});

fn names() -> impl Iterator<Item = &'static str> {
    CASES.iter().map(|(name, _)| name.as_str())
}

fn case(name: &str) -> &'static Case {
    &CASES.iter().find(|(n, _)| n == name).expect("known case").1
}

#[divan::bench(args = names())]
fn mutate(bencher: divan::Bencher, name: &str) {
    let c = case(name);
    bencher
        .counter(divan::counter::BytesCount::new(c.bytes.len()))
        .bench(|| {
            let input = Input {
                operation: Operation::Create,
                namespace: c.namespace,
                object: divan::black_box(&c.object),
            };
            outcome(&input)
        });
}

#[divan::bench(args = names())]
fn parse_and_mutate(bencher: divan::Bencher, name: &str) {
    let c = case(name);
    bencher
        .counter(divan::counter::BytesCount::new(c.bytes.len()))
        .bench(|| {
            let object: Value =
                serde_json::from_slice(divan::black_box(&c.bytes)).expect("valid JSON");
            let input = Input {
                operation: Operation::Create,
                namespace: c.namespace,
                object: &object,
            };
            outcome(&input).map(|m| m.patch.0.len())
        });
}

#[divan::bench(args = names())]
fn mutate_again(bencher: divan::Bencher, name: &str) {
    let c = case(name);
    bencher.bench(|| {
        let input = Input {
            operation: Operation::Update,
            namespace: c.namespace,
            object: divan::black_box(&c.patched),
        };
        outcome(&input)
    });
}

/// The pure core of `POST /mutate` on the bodies `scripts/measure/bench-load` sends,
/// and its parts:
/// - `review_to_bytes`: bytes -> `admission::review` -> reply JSON bytes
///   (everything but TLS, HTTP, metrics and the log line);
/// - `parse_review`: what the review path parses: the request, with the
///   object built into a `serde_json::Value` for the governed CREATE and
///   only scanned for the ungoverned one; `parse_value` the whole body into
///   a `serde_json::Value` and `parse_floor` the scan that validates the
///   body and builds nothing (the floor of any parse), for comparison;
/// - `engine_on_object`: the engine on the parsed object (governed body);
/// - `log_line`: the per-review JSON log line, formatted into a sink through
///   the format `serve` uses.
mod review {
    use super::{SNAPSHOT, corpus};
    use knative_ha_webhook::admission::{self, ReviewOptions};

    const BODIES: &[&str] = &["governed", "ungoverned"];

    fn body(name: &str) -> &'static [u8] {
        match name {
            "governed" => include_bytes!("../scripts/measure/bench/review-governed.json"),
            _ => include_bytes!("../scripts/measure/bench/review-ungoverned.json"),
        }
    }

    #[divan::bench(args = BODIES)]
    fn review_to_bytes(name: &str) -> Vec<u8> {
        let answer = admission::review(
            &SNAPSHOT,
            divan::black_box(body(name)),
            &ReviewOptions::default(),
        );
        match answer {
            admission::Answer::Reviewed(r) => r.body,
            admission::Answer::BadRequest(b) => panic!("{}", b.reason),
        }
    }

    #[divan::bench(args = BODIES)]
    fn parse_review(name: &str) -> Option<serde_json::Value> {
        admission::parse(&SNAPSHOT, divan::black_box(body(name))).expect("a usable review")
    }

    /// The floor of any parse that validates the body: serde_json's scan
    /// of the whole body, building nothing (`IgnoredAny`).
    #[divan::bench(args = BODIES)]
    fn parse_floor(name: &str) {
        let _: serde::de::IgnoredAny =
            serde_json::from_slice(divan::black_box(body(name))).expect("valid JSON");
    }

    #[divan::bench(args = BODIES)]
    fn parse_value(name: &str) -> serde_json::Value {
        serde_json::from_slice(divan::black_box(body(name))).expect("valid JSON")
    }

    #[divan::bench]
    fn engine_on_object(bencher: divan::Bencher) {
        let object = admission::parse(&SNAPSHOT, body("governed"))
            .expect("a usable review")
            .expect("an object");
        let input = knative_ha_webhook::engine::Input {
            operation: knative_ha_webhook::engine::Operation::Create,
            namespace: corpus::GOVERNED,
            object: &object,
        };
        bencher.bench(|| super::outcome(divan::black_box(&input)));
    }

    /// The per-review line, through the format `serve` uses
    /// (`telemetry::json_format`: `tracing-subscriber`'s JSON format), as
    /// the server writes it: inside the review's span, its names recorded
    /// there (the span's creation and records counted too).
    #[divan::bench]
    fn log_line(bencher: divan::Bencher) {
        let subscriber = tracing_subscriber::fmt()
            .json()
            .event_format(knative_ha_webhook::telemetry::json_format())
            .with_writer(std::io::sink)
            .finish();
        tracing::subscriber::with_default(subscriber, || bencher.bench_local(review_line));
    }

    fn review_line() {
        use tracing::field::display;
        let span = knative_ha_webhook::telemetry::review_span();
        span.record("uid", display("6ba7b810-9dad-11d1-80b4-00c04fd430c8"));
        span.record("kind", "Deployment");
        span.record("namespace", display("knative-serving"));
        span.record("name", display("controller"));
        span.record("operation", "CREATE");
        span.in_scope(|| {
            tracing::info!(
                outcome = "patched",
                patch_ops = 2usize,
                duration_ms = 0.021,
                "review"
            )
        })
    }
}

fn main() {
    divan::main();
}
