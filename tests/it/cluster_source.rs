//! The cluster policy source against the fake API server (testkit/src/fakeapi):
//! real HTTP, real kube client built from a kubeconfig, real watchers.
//!
//! Each scenario asserts what the request path would see afterwards: the
//! policy object in force per namespace in the published snapshot, and what
//! `Snapshot::mutate` returns for the real Knative v1.23.0 `controller`
//! Deployment.

use crate::support;
use crate::support::cluster as cluster_harness;
use crate::support::fakeapi;
use crate::support::router;

use std::sync::OnceLock;

use cluster_harness::{GROUP, HAPS, Harness, OWN_NS, hap, hpa, policy_configmap, policy_yaml};
use fakeapi::FakeApi;
use knative_ha_webhook::admission::ReviewOptions;
use knative_ha_webhook::engine::{Input, Operation};
use router::Mutate;
use serde_json::{Value, json};
use support::wait_until;

const SERVING: &str = "knative-serving";

/// The real `controller` Deployment of Knative Serving v1.23.0.
fn controller() -> &'static Value {
    static CONTROLLER: OnceLock<Value> = OnceLock::new();
    CONTROLLER.get_or_init(support::corpus::controller_deployment)
}

fn hap_created(name: &str, namespace: &str, replicas: i64, created: &str) -> Value {
    let mut v = hap(name, namespace, replicas);
    v["metadata"]["creationTimestamp"] = json!(created);
    v
}

impl Harness {
    /// (policy name, replicas) in force for `namespace`.
    fn in_force(&self, namespace: &str) -> Option<(String, Option<i32>)> {
        self.store
            .load()
            .policy_for(namespace)
            .map(|p| (p.name.clone(), p.spec.replicas))
    }

    /// Waits until `want` (policy name, replicas) is in force for
    /// `namespace`; for knative-serving also checks, on that same snapshot,
    /// what the engine does to the real controller Deployment.
    async fn wait_in_force(&self, namespace: &str, want: Option<(&str, i32)>) {
        let want_owned = want.map(|(n, r)| (n.to_string(), Some(r)));
        let snapshot = wait_until(
            &format!("policy for {namespace} to be {want_owned:?}"),
            async || {
                let snap = self.store.load();
                let got = snap
                    .policy_for(namespace)
                    .map(|p| (p.name.clone(), p.spec.replicas));
                (got == want_owned).then_some(snap)
            },
        )
        .await;
        if namespace != SERVING {
            return;
        }
        let mutation = crate::support::mutate_in(
            &snapshot,
            &Input {
                operation: Operation::Create,
                namespace: SERVING,
                object: controller(),
            },
        )
        .expect("engine accepts the controller Deployment");
        // The same through the server's /mutate route.
        let via_mutate = self.replicas_via_mutate().await;
        let hpa_backed_now = snapshot
            .hpa_targets
            .get(SERVING)
            .is_some_and(|t| t.contains("controller"));
        match want {
            _ if !snapshot.synced => {
                assert_eq!(via_mutate, None, "not synced: /mutate returns no patch")
            }
            None => assert_eq!(via_mutate, None, "no policy: /mutate returns no patch"),
            Some(_) if hpa_backed_now => {
                assert!(
                    via_mutate.is_none()
                        || via_mutate == Some(controller()["spec"]["replicas"].clone()),
                    "HPA-scaled controller: /mutate leaves replicas alone: {via_mutate:?}"
                )
            }
            Some((_, replicas)) => assert_eq!(
                via_mutate,
                Some(json!(replicas)),
                "/mutate applies the policy in force"
            ),
        }
        match (want, mutation) {
            (None, None) => {}
            (None, Some(m)) => panic!("no policy in force, yet a mutation: {m:?}"),
            (Some(_), None) => panic!("policy in force, yet no mutation"),
            (Some((_, replicas)), Some(m)) => {
                let mut obj = controller().clone();
                json_patch::patch(&mut obj, &m.patch).expect("the engine's patch applies");
                let hpa_backed = snapshot
                    .hpa_targets
                    .get(SERVING)
                    .is_some_and(|t| t.contains("controller"));
                if hpa_backed {
                    assert_eq!(
                        obj["spec"]["replicas"],
                        controller()["spec"]["replicas"],
                        "an HPA scales controller: the policy leaves its replicas alone"
                    );
                } else {
                    assert_eq!(
                        obj["spec"]["replicas"],
                        json!(replicas),
                        "the engine applies the policy in force: {:?}",
                        m.changes
                    );
                }
            }
        }
    }

    /// What the engine returns for the real controller Deployment: `None`
    /// when no policy governs knative-serving.
    fn mutate_controller(&self) -> Option<knative_ha_webhook::engine::Mutation> {
        crate::support::mutate_in(
            &self.store.load(),
            &Input {
                operation: Operation::Create,
                namespace: SERVING,
                object: controller(),
            },
        )
        .expect("engine accepts the controller Deployment")
    }

    /// POSTs an AdmissionReview (CREATE of the real controller Deployment)
    /// to the server's `/mutate` route over this source's store; returns the
    /// `response` of the review.
    async fn post_mutate(&self) -> Value {
        use base64::Engine as _;
        let review = support::corpus::review(
            "00000000-0000-0000-0000-000000000001",
            "CREATE",
            SERVING,
            controller(),
        );
        let (status, mut body) = Mutate::new(self.store.clone(), ReviewOptions::default())
            .post(&review)
            .await;
        assert_eq!(status, 200);
        let mut response = body["response"].take();
        assert_eq!(response["allowed"], true, "{response}");
        if let Some(patch) = response["patch"].as_str() {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(patch)
                .expect("patch is base64");
            response["patch"] = serde_json::from_slice(&raw).expect("patch is JSON");
        }
        response
    }

    /// `spec.replicas` of the controller Deployment after the patch `/mutate`
    /// returns (None: no patch at all).
    async fn replicas_via_mutate(&self) -> Option<Value> {
        let response = self.post_mutate().await;
        let patch = response.get("patch").filter(|p| !p.is_null())?;
        let patch: json_patch::Patch = serde_json::from_value(patch.clone()).unwrap();
        let mut obj = controller().clone();
        json_patch::patch(&mut obj, &patch).expect("the /mutate patch applies");
        Some(obj["spec"]["replicas"].clone())
    }

    fn ready(&self, name: &str) -> Option<Value> {
        let obj = self.api.get(GROUP, HAPS, "", name)?;
        obj["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Ready")
            .cloned()
    }

    /// Waits until the Ready condition of `name` has this status/reason and
    /// observedGeneration equals the object's generation.
    async fn wait_ready(&self, name: &str, status: &str, reason: &str) -> Value {
        wait_until(&format!("{name} Ready={status}/{reason}"), async || {
            let obj = self.api.get(GROUP, HAPS, "", name)?;
            let c = self.ready(name)?;
            let current = c["status"] == status
                && c["reason"] == reason
                && c["observedGeneration"] == obj["metadata"]["generation"]
                && obj["status"]["observedGeneration"] == obj["metadata"]["generation"];
            current.then_some(c)
        })
        .await
    }

    fn status_patches(&self, name: &str) -> usize {
        let path = format!("/apis/knativeha.dev/v1alpha1/highavailabilitypolicies/{name}/status");
        self.api
            .requests()
            .iter()
            .filter(|r| r.method == "PATCH" && r.path == path)
            .count()
    }

    fn lists_of(&self, path: &str) -> usize {
        self.api
            .requests()
            .iter()
            .filter(|r| r.method == "GET" && r.path == path && !r.query.contains("watch=true"))
            .count()
    }
}

#[tokio::test]
async fn create_puts_policy_in_force_and_marks_it_ready_once() {
    let h = Harness::synced(FakeApi::start().await).await;
    assert_eq!(h.in_force(SERVING), None);
    assert!(
        h.mutate_controller().is_none(),
        "no policy yet: no mutation"
    );

    h.api.create(GROUP, HAPS, hap("serving", SERVING, 3));
    h.wait_in_force(SERVING, Some(("serving", 3))).await;
    assert!(
        h.mutate_controller().is_some(),
        "policy in force: engine runs"
    );

    let ready = h.wait_ready("serving", "True", "Valid").await;
    assert_eq!(ready["observedGeneration"], 1);
    assert!(ready["lastTransitionTime"].is_string());

    // No write loop: an unrelated change is processed (its policy appears)
    // without another status write for `serving`.
    let patches = h.status_patches("serving");
    assert_eq!(patches, 1);
    h.api.create(GROUP, HAPS, hap("other", "other-ns", 2));
    h.wait_in_force("other-ns", Some(("other", 2))).await;
    h.wait_ready("other", "True", "Valid").await;
    assert_eq!(h.status_patches("serving"), patches);
}

#[tokio::test]
async fn edit_changes_the_policy_and_observed_generation() {
    let h = Harness::synced(FakeApi::start().await).await;
    h.api.create(GROUP, HAPS, hap("serving", SERVING, 3));
    h.wait_in_force(SERVING, Some(("serving", 3))).await;
    let first = h.wait_ready("serving", "True", "Valid").await;

    let edited = h.api.update(GROUP, HAPS, "", "serving", |o| {
        o["spec"]["replicas"] = json!(5);
    });
    assert_eq!(edited["metadata"]["generation"], 2);
    h.wait_in_force(SERVING, Some(("serving", 5))).await;
    let second = h.wait_ready("serving", "True", "Valid").await;
    assert_eq!(second["observedGeneration"], 2);
    assert_eq!(
        first["lastTransitionTime"], second["lastTransitionTime"],
        "status stayed True: lastTransitionTime must not move"
    );
}

#[tokio::test]
async fn invalid_edit_keeps_last_valid_version_and_reports_the_field() {
    let h = Harness::synced(FakeApi::start().await).await;
    h.api.create(GROUP, HAPS, hap("serving", SERVING, 3));
    h.wait_in_force(SERVING, Some(("serving", 3))).await;
    h.wait_ready("serving", "True", "Valid").await;

    // An unknown field: the whole edit is rejected, replicas 7 included.
    h.api.update(GROUP, HAPS, "", "serving", |o| {
        o["spec"]["replicas"] = json!(7);
        o["spec"]["replicaz"] = json!(7);
    });
    let ready = h.wait_ready("serving", "False", "Invalid").await;
    let message = ready["message"].as_str().unwrap();
    assert!(
        message.contains("replicaz"),
        "message names the field: {message}"
    );
    assert_eq!(
        h.in_force(SERVING),
        Some(("serving".to_string(), Some(3))),
        "the last valid version stays in force"
    );
    assert!(h.mutate_controller().is_some());

    // Fixing it applies the fix and flips Ready back.
    h.api.update(GROUP, HAPS, "", "serving", |o| {
        o["spec"].as_object_mut().unwrap().remove("replicaz");
    });
    h.wait_in_force(SERVING, Some(("serving", 7))).await;
    h.wait_ready("serving", "True", "Valid").await;
}

#[tokio::test]
async fn invalid_policy_from_the_start_governs_nothing() {
    let api = FakeApi::start().await;
    let mut bad = hap("broken", SERVING, 3);
    bad["spec"]["podAntiAffinity"] = json!({"type": "Sometimes"});
    api.create(GROUP, HAPS, bad);
    let h = Harness::synced(api).await;
    let ready = h.wait_ready("broken", "False", "Invalid").await;
    assert!(ready["message"].as_str().unwrap().contains("Sometimes"));
    assert_eq!(h.in_force(SERVING), None);
    assert!(h.mutate_controller().is_none());
}

#[tokio::test]
async fn conflict_oldest_resource_wins_and_the_other_is_reported() {
    let api = FakeApi::start().await;
    api.create(
        GROUP,
        HAPS,
        hap_created("young", SERVING, 5, "2026-03-01T00:00:00Z"),
    );
    api.create(
        GROUP,
        HAPS,
        hap_created("old", SERVING, 3, "2026-01-01T00:00:00Z"),
    );
    let h = Harness::synced(api).await;
    h.wait_in_force(SERVING, Some(("old", 3))).await;
    h.wait_ready("old", "True", "Valid").await;
    let c = h.wait_ready("young", "False", "Conflict").await;
    let message = c["message"].as_str().unwrap();
    assert!(message.contains("HighAvailabilityPolicy/old"), "{message}");
    assert!(message.contains("spec.targetNamespace"), "{message}");

    // The winner leaves: the other takes over and becomes Ready.
    h.api.delete(GROUP, HAPS, "", "old");
    h.wait_in_force(SERVING, Some(("young", 5))).await;
    h.wait_ready("young", "True", "Valid").await;
}

#[tokio::test]
async fn resource_wins_over_configmap_which_gets_an_event() {
    let h = Harness::synced(FakeApi::start().await).await;
    h.api.create(
        "",
        "configmaps",
        policy_configmap("ha-policy", &policy_yaml("from-cm", SERVING, 2)),
    );
    h.wait_in_force(SERVING, Some(("from-cm", 2))).await;
    wait_until("Valid event on the ConfigMap", async || {
        h.api
            .events_for("ha-policy")
            .into_iter()
            .find(|e| e["reason"] == "Valid")
    })
    .await;

    h.api.create(GROUP, HAPS, hap("from-cr", SERVING, 4));
    h.wait_in_force(SERVING, Some(("from-cr", 4))).await;
    let event = wait_until("Conflict event on the ConfigMap", async || {
        h.api
            .events_for("ha-policy")
            .into_iter()
            .find(|e| e["reason"] == "Conflict")
    })
    .await;
    assert_eq!(event["type"], "Warning");
    assert_eq!(event["regarding"]["kind"], "ConfigMap");
    assert_eq!(event["metadata"]["namespace"], OWN_NS);
    assert!(
        event["note"]
            .as_str()
            .unwrap()
            .contains("HighAvailabilityPolicy/from-cr"),
        "{event}"
    );

    h.api.delete(GROUP, HAPS, "", "from-cr");
    h.wait_in_force(SERVING, Some(("from-cm", 2))).await;
}

#[tokio::test]
async fn configmap_outside_own_namespace_or_unlabelled_is_ignored() {
    let h = Harness::synced(FakeApi::start().await).await;
    let mut elsewhere = policy_configmap("elsewhere", &policy_yaml("elsewhere", SERVING, 9));
    elsewhere["metadata"]["namespace"] = json!("default");
    h.api.create("", "configmaps", elsewhere);
    let mut unlabelled = policy_configmap("unlabelled", &policy_yaml("unlabelled", SERVING, 8));
    unlabelled["metadata"]["labels"] = json!({});
    h.api.create("", "configmaps", unlabelled);
    // A later, visible change proves the earlier ones were processed.
    h.api.create(
        "",
        "configmaps",
        policy_configmap("marker", &policy_yaml("marker", "marker-ns", 1)),
    );
    h.wait_in_force("marker-ns", Some(("marker", 1))).await;
    assert_eq!(h.in_force(SERVING), None);

    // Labelling it later brings it in; unlabelling takes it out again.
    h.api.update("", "configmaps", OWN_NS, "unlabelled", |o| {
        o["metadata"]["labels"] = json!({"knativeha.dev/policy": "true"});
    });
    h.wait_in_force(SERVING, Some(("unlabelled", 8))).await;
    h.api.update("", "configmaps", OWN_NS, "unlabelled", |o| {
        o["metadata"]["labels"] = json!({});
    });
    h.wait_in_force(SERVING, None).await;
}

#[tokio::test]
async fn invalid_configmap_gets_a_warning_event_and_applies_nothing() {
    let h = Harness::synced(FakeApi::start().await).await;
    let yaml = policy_yaml("cm", SERVING, 2).replace("replicas: 2", "replicas: 2\n  bogusField: 1");
    h.api
        .create("", "configmaps", policy_configmap("bad-cm", &yaml));
    let event = wait_until("Invalid event on the ConfigMap", async || {
        h.api
            .events_for("bad-cm")
            .into_iter()
            .find(|e| e["reason"] == "Invalid")
    })
    .await;
    assert_eq!(event["type"], "Warning");
    let note = event["note"].as_str().unwrap();
    assert!(note.contains("data.policy.yaml"), "{note}");
    assert!(note.contains("bogusField"), "{note}");
    assert_eq!(h.in_force(SERVING), None);
    assert!(h.mutate_controller().is_none());
}

#[tokio::test]
async fn delete_removes_the_policy() {
    let api = FakeApi::start().await;
    api.create(GROUP, HAPS, hap("serving", SERVING, 3));
    let h = Harness::synced(api).await;
    h.wait_in_force(SERVING, Some(("serving", 3))).await;
    assert!(h.mutate_controller().is_some());
    h.api.delete(GROUP, HAPS, "", "serving");
    h.wait_in_force(SERVING, None).await;
    assert!(h.mutate_controller().is_none());
}

#[tokio::test]
async fn gone_410_forces_a_relist_that_sees_missed_changes() {
    let h = Harness::synced(FakeApi::start().await).await;
    h.api.create(GROUP, HAPS, hap("serving", SERVING, 3));
    h.wait_in_force(SERVING, Some(("serving", 3))).await;
    let list_path = "/apis/knativeha.dev/v1alpha1/highavailabilitypolicies";
    let lists_before = h.lists_of(list_path);

    // 410 in the open watch streams: the watcher relists.
    h.api.expire_watches();
    wait_until("a relist after 410", async || {
        (h.lists_of(list_path) > lists_before).then_some(())
    })
    .await;
    h.api.update(GROUP, HAPS, "", "serving", |o| {
        o["spec"]["replicas"] = json!(4)
    });
    h.wait_in_force(SERVING, Some(("serving", 4))).await;

    // Changes made while the source cannot watch, with the event log
    // compacted: resuming gets 410 and only the relist sees them (the
    // deletion included).
    h.api.stop().await;
    h.api.delete(GROUP, HAPS, "", "serving");
    h.api.create(GROUP, HAPS, hap("replacement", SERVING, 6));
    h.api.compact();
    h.api.restart().await;
    h.wait_in_force(SERVING, Some(("replacement", 6))).await;
}

#[tokio::test]
async fn dropped_watch_connections_resume_without_losing_changes() {
    let h = Harness::synced(FakeApi::start().await).await;
    h.api.create(GROUP, HAPS, hap("serving", SERVING, 3));
    h.wait_in_force(SERVING, Some(("serving", 3))).await;
    for replicas in [4, 5, 6] {
        h.api.drop_watches();
        h.api.update(GROUP, HAPS, "", "serving", |o| {
            o["spec"]["replicas"] = json!(replicas)
        });
        h.wait_in_force(SERVING, Some(("serving", replicas))).await;
    }
}

#[tokio::test]
async fn api_server_restart_keeps_policies_and_picks_up_changes() {
    let api = FakeApi::start().await;
    api.create(GROUP, HAPS, hap("serving", SERVING, 3));
    api.create(
        "",
        "configmaps",
        policy_configmap("cm", &policy_yaml("from-cm", "other-ns", 2)),
    );
    let h = Harness::synced(api).await;
    h.wait_in_force(SERVING, Some(("serving", 3))).await;
    h.wait_metric(r#"knative_ha_webhook_source_up{source="policies"} 1"#)
        .await;

    h.api.stop().await;
    // The source notices (the metric goes down) and keeps what it had.
    h.wait_metric(r#"knative_ha_webhook_source_up{source="policies"} 0"#)
        .await;
    assert!(
        h.metrics_text()
            .contains("knative_ha_webhook_watch_errors_total{source=\"policies\"}")
    );
    assert_eq!(h.in_force(SERVING), Some(("serving".into(), Some(3))));
    assert_eq!(h.in_force("other-ns"), Some(("from-cm".into(), Some(2))));
    assert!(h.store.load().synced, "stays synced while the API is down");
    assert!(h.mutate_controller().is_some());

    h.api.update(GROUP, HAPS, "", "serving", |o| {
        o["spec"]["replicas"] = json!(9)
    });
    h.api.restart().await;
    h.wait_in_force(SERVING, Some(("serving", 9))).await;
    h.wait_metric(r#"knative_ha_webhook_source_up{source="policies"} 1"#)
        .await;
    h.wait_ready("serving", "True", "Valid").await;
}

#[tokio::test]
async fn crd_missing_configmaps_alone_work_and_a_later_crd_is_picked_up() {
    let api = FakeApi::start().await;
    api.set_installed(GROUP, HAPS, false);
    api.create(
        "",
        "configmaps",
        policy_configmap("cm", &policy_yaml("from-cm", SERVING, 2)),
    );
    let h = Harness::synced(api).await;
    h.wait_in_force(SERVING, Some(("from-cm", 2))).await;
    assert!(h.mutate_controller().is_some());

    h.api.set_installed(GROUP, HAPS, true);
    h.api.create(GROUP, HAPS, hap("from-cr", SERVING, 4));
    h.wait_in_force(SERVING, Some(("from-cr", 4))).await;
}

#[tokio::test]
async fn hpa_reflector_feeds_hpa_targets() {
    let api = FakeApi::start().await;
    api.create(
        "autoscaling",
        "horizontalpodautoscalers",
        hpa(SERVING, "activator", "activator"),
    );
    api.create(GROUP, HAPS, hap("serving", SERVING, 3));
    let h = Harness::synced(api).await;
    // No HPA on controller yet: the policy sets its replicas.
    h.wait_in_force(SERVING, Some(("serving", 3))).await;
    // The Deployments HPAs target (the mark that every HPA is listed aside).
    let targets = |h: &Harness| {
        h.store
            .load()
            .hpa_targets
            .get(SERVING)
            .map(|s| {
                s.iter()
                    .filter(|t| t.as_str() != knative_ha_webhook::engine::HPAS_LISTED)
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    assert_eq!(targets(&h), vec!["activator".to_string()]);
    assert!(
        h.store.load().hpa_targets[SERVING].contains(knative_ha_webhook::engine::HPAS_LISTED),
        "a synced watch lists every HPA"
    );

    h.api.create(
        "autoscaling",
        "horizontalpodautoscalers",
        hpa(SERVING, "ctl", "controller"),
    );
    wait_until("controller HPA seen", async || {
        (targets(&h) == ["activator", "controller"]).then_some(())
    })
    .await;
    // Now an HPA scales controller: the engine leaves its replicas alone.
    h.wait_in_force(SERVING, Some(("serving", 3))).await;
    let m = h.mutate_controller().expect("policy in force");
    assert!(
        !m.patch
            .0
            .iter()
            .any(|op| op.path().to_string().as_str() == "/spec/replicas"),
        "no replicas op for an HPA-scaled Deployment: {:?}",
        m.changes
    );
    h.api.delete(
        "autoscaling",
        "horizontalpodautoscalers",
        SERVING,
        "activator",
    );
    wait_until("activator HPA gone", async || {
        (targets(&h) == ["controller"]).then_some(())
    })
    .await;
}

#[tokio::test]
async fn not_synced_until_every_first_list_completes() {
    let api = FakeApi::start().await;
    api.create(GROUP, HAPS, hap("serving", SERVING, 3));
    api.create(
        "",
        "configmaps",
        policy_configmap("cm", &policy_yaml("from-cm", "other-ns", 2)),
    );
    api.hold_lists("autoscaling", "horizontalpodautoscalers");
    api.fail_lists("", "configmaps", &[500]);
    let h = Harness::start(api).await;

    // The policy list completes; the ConfigMap list completes after a
    // failure and a retry (its policy is published); the HPA list hangs:
    // not synced.
    h.wait_in_force(SERVING, Some(("serving", 3))).await;
    h.wait_in_force("other-ns", Some(("from-cm", 2))).await;
    let cm_path = format!("/api/v1/namespaces/{OWN_NS}/configmaps");
    assert!(h.lists_of(&cm_path) >= 2, "the failed list was retried");
    wait_until("HPA list requested", async || {
        (h.lists_of("/apis/autoscaling/v2/namespaces/knative-serving/horizontalpodautoscalers")
            >= 1)
            .then_some(())
    })
    .await;
    assert!(!h.store.load().synced);
    let response = h.post_mutate().await;
    assert!(
        response.get("patch").is_none_or(Value::is_null),
        "not synced: admitted without a patch: {response}"
    );
    let warnings = response["warnings"].to_string();
    assert!(warnings.contains("not yet synced"), "{warnings}");
    assert!(
        h.ready("serving").is_none(),
        "no status is written before the first sync"
    );

    h.api
        .release_lists("autoscaling", "horizontalpodautoscalers");
    h.wait_synced().await;
    h.wait_ready("serving", "True", "Valid").await;
    h.wait_metric("knative_ha_webhook_cluster_synced 1").await;
}

#[tokio::test]
async fn restarted_source_does_not_rewrite_an_unchanged_status() {
    let h = Harness::synced(FakeApi::start().await).await;
    h.api.create(GROUP, HAPS, hap("serving", SERVING, 3));
    h.wait_ready("serving", "True", "Valid").await;
    let patches = h.status_patches("serving");
    assert_eq!(patches, 1);

    // A second source (a restarted webhook) over the same objects.
    let second = Harness::synced(h.api_handle()).await;
    second.wait_in_force(SERVING, Some(("serving", 3))).await;
    // Status writes are sequential: once a later object's status is
    // written, any write for `serving` would have happened.
    second.api.create(GROUP, HAPS, hap("later", "later-ns", 1));
    second.wait_ready("later", "True", "Valid").await;
    assert_eq!(h.status_patches("serving"), patches);
}

#[tokio::test]
async fn each_kind_of_invalid_edit_keeps_the_last_valid_version() {
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit, &str); 4] = [
        (
            "unknown field",
            |o| o["spec"]["replicaz"] = json!(4),
            "replicaz",
        ),
        (
            "replicas out of bounds",
            |o| o["spec"]["replicas"] = json!(1000),
            "spec.replicas",
        ),
        (
            "replicas of the wrong type",
            |o| o["spec"]["replicas"] = json!("three"),
            "replicas",
        ),
        (
            "empty target namespace",
            |o| o["spec"]["targetNamespace"] = json!(""),
            "targetNamespace",
        ),
    ];
    let h = Harness::synced(FakeApi::start().await).await;
    h.api.create(GROUP, HAPS, hap("serving", SERVING, 3));
    h.wait_in_force(SERVING, Some(("serving", 3))).await;
    for (case, edit, field) in cases {
        let valid = h.api.get(GROUP, HAPS, "", "serving").unwrap();
        h.api.update(GROUP, HAPS, "", "serving", edit);
        let ready = h.wait_ready("serving", "False", "Invalid").await;
        let message = ready["message"].as_str().unwrap();
        assert!(
            message.contains(field),
            "{case}: message names {field}: {message}"
        );
        h.wait_in_force(SERVING, Some(("serving", 3))).await;
        // Back to the valid spec for the next case.
        h.api.update(GROUP, HAPS, "", "serving", |o| {
            o["spec"] = valid["spec"].clone()
        });
        h.wait_ready("serving", "True", "Valid").await;
    }
}

#[tokio::test]
async fn failed_status_write_is_retried_and_counted() {
    let h = Harness::synced(FakeApi::start().await).await;
    h.api.fail_next(
        "PATCH",
        "/apis/knativeha.dev/v1alpha1/highavailabilitypolicies/serving/status",
        &[500],
    );
    h.api.create(GROUP, HAPS, hap("serving", SERVING, 3));
    h.wait_in_force(SERVING, Some(("serving", 3))).await;
    h.wait_ready("serving", "True", "Valid").await;
    assert_eq!(
        h.status_patches("serving"),
        2,
        "one failed write, one retry"
    );
    h.wait_metric("knative_ha_webhook_status_write_errors_total 1")
        .await;
}
