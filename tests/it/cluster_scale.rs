//! What the cluster source pays for HPAs, and `--governed-namespaces`,
//! against the fake API server (testkit/src/fakeapi):
//!
//! - HPAs are watched only in namespaces with a policy in force: HPAs
//!   elsewhere are never listed or watched;
//! - an HPA event that changes no `scaleTargetRef` (the HPA controller's
//!   status rewrites) publishes no snapshot;
//! - a policy for a namespace outside `--governed-namespaces` is refused
//!   (`Ready=False`, reason `NotGoverned`; a ConfigMap gets an Event) and
//!   never in force.

use crate::support;
use crate::support::cluster as cluster_harness;
use crate::support::fakeapi;

use cluster_harness::{GROUP, HAPS, Harness, OWN_NS, hpa, policy_configmap, policy_yaml};
use fakeapi::FakeApi;
use knative_ha_webhook::scope::AllowedNamespaces;
use knative_ha_webhook::sources::cluster::ClusterSourceConfig;
use serde_json::json;
use support::wait_until;

const HPAS: &str = "horizontalpodautoscalers";
const SERVING: &str = "knative-serving";

impl Harness {
    async fn governing(api: FakeApi, governed: AllowedNamespaces) -> Harness {
        let config = ClusterSourceConfig {
            governed,
            ..ClusterSourceConfig::new(OWN_NS)
        };
        let h = Harness::start_with(api, config).await;
        h.wait_synced().await;
        h
    }

    /// The Deployments HPAs target (the mark that every HPA is listed aside).
    fn targets(&self, namespace: &str) -> Vec<String> {
        self.store
            .load()
            .hpa_targets
            .get(namespace)
            .map(|t| {
                t.iter()
                    .filter(|t| t.as_str() != knative_ha_webhook::engine::HPAS_LISTED)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default()
    }

    async fn wait_targets(&self, namespace: &str, want: &[&str]) {
        wait_until(
            &format!("HPA targets of {namespace} = {want:?}"),
            async || (self.targets(namespace) == want).then_some(()),
        )
        .await;
    }

    fn metric(&self, name: &str) -> f64 {
        self.metrics_text()
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("metric {name} missing:\n{}", self.metrics_text()))
    }

    fn published(&self) -> f64 {
        self.metric("knative_ha_webhook_cluster_snapshots_published_total")
    }

    /// Paths of every HPA request the source made.
    fn hpa_paths(&self) -> Vec<String> {
        let mut paths: Vec<String> = self
            .api
            .requests()
            .into_iter()
            .filter(|r| r.path.contains(HPAS))
            .map(|r| r.path)
            .collect();
        paths.sort();
        paths.dedup();
        paths
    }
}

#[tokio::test]
async fn hpa_status_updates_and_ungoverned_hpas_publish_nothing() {
    let api = FakeApi::start().await;
    api.create(
        "",
        "configmaps",
        policy_configmap("serving", &policy_yaml("serving", SERVING, 2)),
    );
    api.create("autoscaling", HPAS, hpa(SERVING, "activator", "activator"));
    for i in 0..5 {
        let ns = format!("tenant-{i}");
        api.create("autoscaling", HPAS, hpa(&ns, "app", "app"));
    }
    let s = Harness::governing(api, AllowedNamespaces::all()).await;
    s.wait_targets(SERVING, &["activator"]).await;
    let before = s.published();

    // The HPA controller rewrites status (and a tenant edits its own
    // HPAs): nothing the webhook needs changes.
    for round in 0..20 {
        s.api.update_status(
            "autoscaling",
            HPAS,
            SERVING,
            "activator",
            json!({"currentReplicas": round, "desiredReplicas": round + 1}),
        );
        let ns = format!("tenant-{}", round % 5);
        s.api.update("autoscaling", HPAS, &ns, "app", |o| {
            o["spec"]["scaleTargetRef"]["name"] = json!(format!("app-{round}"))
        });
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // A real target change afterwards, on the same watch: once it is
    // published, every earlier event has been handled.
    s.api
        .create("autoscaling", HPAS, hpa(SERVING, "ctl", "controller"));
    s.wait_targets(SERVING, &["activator", "controller"]).await;
    assert_eq!(
        s.published(),
        before + 1.0,
        "only the target change published a snapshot"
    );
    assert!(
        !s.store.load().hpa_targets.contains_key("tenant-0"),
        "HPAs outside governed namespaces are not tracked"
    );
    assert_eq!(
        s.hpa_paths(),
        vec![format!("/apis/autoscaling/v2/namespaces/{SERVING}/{HPAS}")],
        "HPAs are listed and watched only where a policy is in force"
    );

    // The policy goes: its namespace's HPA watch stops and its targets go.
    s.api.delete("", "configmaps", OWN_NS, "serving");
    s.wait_targets(SERVING, &[]).await;
    let published = s.published();
    s.api.update_status(
        "autoscaling",
        HPAS,
        SERVING,
        "activator",
        json!({"currentReplicas": 9}),
    );
    s.api.create(
        "",
        "configmaps",
        policy_configmap("later", &policy_yaml("later", "later-ns", 2)),
    );
    wait_until("later-ns policy in force, its HPAs listed", async || {
        let snapshot = s.store.load();
        snapshot.policy_for("later-ns")?;
        snapshot
            .hpa_targets
            .get("later-ns")?
            .contains(knative_ha_webhook::engine::HPAS_LISTED)
            .then_some(())
    })
    .await;
    // The later policy and its watch's first list (one snapshot or two);
    // nothing from the stopped watch, whose namespace stays untracked.
    let sent = s.published() - published;
    assert!((1.0..=2.0).contains(&sent), "{sent} snapshots");
    assert!(
        !s.store.load().hpa_targets.contains_key(SERVING),
        "the stopped watch sent nothing"
    );
}

#[tokio::test]
async fn policies_outside_governed_namespaces_are_refused() {
    let api = FakeApi::start().await;
    api.create(GROUP, HAPS, cluster_harness::hap("serving", SERVING, 3));
    api.create(GROUP, HAPS, cluster_harness::hap("outside", "default", 3));
    api.create("autoscaling", HPAS, hpa("default", "app", "app"));
    api.create(
        "",
        "configmaps",
        policy_configmap("cm-outside", &policy_yaml("cm-outside", "other-ns", 2)),
    );
    let s = Harness::governing(api, AllowedNamespaces::only([SERVING, "kourier-system"])).await;

    let ready = wait_until("outside: Ready=False NotGoverned", async || {
        let obj = s.api.get(GROUP, HAPS, "", "outside")?;
        let cond = obj["status"]["conditions"].as_array()?.first()?.clone();
        (cond["reason"] == "NotGoverned").then_some(cond)
    })
    .await;
    assert_eq!(ready["status"], "False");
    let message = ready["message"].as_str().unwrap();
    assert!(
        message.contains("default")
            && message.contains("--governed-namespaces knative-serving,kourier-system"),
        "{message}"
    );
    let event = wait_until("a NotGoverned Event on the ConfigMap", async || {
        s.api
            .events_for("cm-outside")
            .into_iter()
            .find(|e| e["reason"] == "NotGoverned")
    })
    .await;
    assert_eq!(event["type"], "Warning");

    let snapshot = s.store.load();
    assert!(snapshot.policy_for(SERVING).is_some());
    assert!(snapshot.policy_for("default").is_none());
    assert!(snapshot.policy_for("other-ns").is_none());
    assert!(
        s.metrics_text()
            .contains("knative_ha_webhook_policy_status{state=\"not_governed\"} 2"),
        "{}",
        s.metrics_text()
    );
    assert!(
        s.hpa_paths().iter().all(|p| !p.contains("/default/")),
        "no HPA watch outside the governed namespaces: {:?}",
        s.hpa_paths()
    );
}
