//! The reconciler lists a governed namespace page by page (`limit` +
//! `continue`), so a namespace with thousands of objects never needs one
//! huge response; every object of every page is reconciled.

use crate::support::cluster::reconcile_pass;
use crate::support::fakeapi;

use fakeapi::FakeApi;
use knative_ha_webhook::engine::Snapshot;
use knative_ha_webhook::policy::{HighAvailabilityPolicySpec, Policy};
use serde_json::json;

const NS: &str = "big";
const DEPLOYMENTS: usize = 1_201;

fn deployment(i: usize) -> serde_json::Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": format!("app-{i:04}"), "namespace": NS},
        "spec": {"replicas": 1,
                 "selector": {"matchLabels": {"app": format!("app-{i:04}")}},
                 "template": {"metadata": {"labels": {"app": format!("app-{i:04}")}},
                              "spec": {"containers": [{"name": "app", "image": "example/app"}]}}},
    })
}

#[tokio::test]
async fn a_namespace_larger_than_one_page_is_listed_in_pages() {
    let api = FakeApi::start().await;
    api.create_many(
        "apps",
        "deployments",
        (0..DEPLOYMENTS).map(deployment).collect(),
    );
    let snapshot = Snapshot::from_policies([Policy {
        name: "big".into(),
        spec: HighAvailabilityPolicySpec {
            target_namespace: NS.into(),
            replicas: Some(2),
            ..Default::default()
        },
    }]);
    let report = reconcile_pass(&api, &snapshot, true).await;
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let deployments = report
        .objects
        .keys()
        .filter(|(kind, ns, _)| *kind == "Deployment" && ns == NS)
        .count();
    assert_eq!(deployments, DEPLOYMENTS, "every page was reconciled");

    let lists: Vec<String> = api
        .requests()
        .into_iter()
        .filter(|r| {
            r.method == "GET" && r.path == format!("/apis/apps/v1/namespaces/{NS}/deployments")
        })
        .map(|r| r.query)
        .collect();
    assert_eq!(lists.len(), 3, "1,201 objects in pages of 500: {lists:?}");
    assert!(lists.iter().all(|q| q.contains("limit=500")), "{lists:?}");
    assert!(
        lists.iter().skip(1).all(|q| q.contains("continue=")),
        "later pages continue the first: {lists:?}"
    );
}
