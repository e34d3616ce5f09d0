//! The fake API server (testkit/src/fakeapi) loaded for `scripts/measure/bench-scale`:
//! N HPAs in N/20 namespaces (`tenant-*`, no policy there), `inside` HPAs in
//! knative-serving, one HighAvailabilityPolicy for knative-serving.
//!
//! Prints `KUBECONFIG=<path>` and then waits for a line on stdin: `churn
//! RATE SECONDS` rewrites HPA statuses (round-robin over every HPA) at RATE
//! per second for SECONDS, then prints `churned N`; `quit` exits.
//!
//! Usage: cargo run --release --example fakeapi_bench -- OUTSIDE INSIDE

use std::io::BufRead;
use std::time::Duration;

use serde_json::{Value, json};
use testkit::fakeapi;

fn hpa(namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minReplicas": 1, "maxReplicas": 10,
                 "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name}},
    })
}

fn arg(i: usize, default: usize) -> usize {
    std::env::args()
        .nth(i)
        .and_then(|a| a.parse().ok())
        .unwrap_or(default)
}

#[tokio::main]
async fn main() {
    let outside = arg(1, 200);
    let inside = arg(2, 0);
    let api = fakeapi::FakeApi::start().await;
    api.create(
        "knativeha.dev",
        "highavailabilitypolicies",
        json!({"apiVersion": "knativeha.dev/v1alpha1", "kind": "HighAvailabilityPolicy",
               "metadata": {"name": "serving"},
               "spec": {"targetNamespace": "knative-serving", "replicas": 2}}),
    );
    let mut all: Vec<(String, String)> = Vec::new();
    let mut objs = Vec::new();
    for i in 0..outside {
        let (ns, name) = (format!("tenant-{}", i / 20), format!("app-{i}"));
        objs.push(hpa(&ns, &name));
        all.push((ns, name));
    }
    for i in 0..inside {
        let (ns, name) = ("knative-serving".to_string(), format!("svc-{i}"));
        objs.push(hpa(&ns, &name));
        all.push((ns, name));
    }
    api.create_many("autoscaling", "horizontalpodautoscalers", objs);
    println!("KUBECONFIG={}", api.kubeconfig_path().display());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    while let Some(line) = rx.recv().await {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["churn", rate, secs] => {
                let rate: u64 = rate.parse().unwrap_or(300);
                let secs: u64 = secs.parse().unwrap_or(10);
                let mut tick =
                    tokio::time::interval(Duration::from_micros(1_000_000 / rate.max(1)));
                let mut n = 0u64;
                for k in 0..rate * secs {
                    tick.tick().await;
                    let (ns, name) = &all[(k as usize) % all.len().max(1)];
                    api.update_status(
                        "autoscaling",
                        "horizontalpodautoscalers",
                        ns,
                        name,
                        json!({"currentReplicas": k % 7, "desiredReplicas": k % 5}),
                    );
                    n += 1;
                    // Keep the fake's event log short (its scans are not measured).
                    if k % 1000 == 999 {
                        api.compact_keep_watches();
                    }
                }
                println!("churned {n}");
            }
            ["quit"] => return,
            _ => println!("unknown command {line:?}"),
        }
    }
}
