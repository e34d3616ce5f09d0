//! The fake API server itself, through the real kube client: the wire
//! behaviour other test files rely on.

use crate::support;
use crate::support::fakeapi;

use fakeapi::{FakeApi, ResourceDef};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::core::ApiResource;
use serde_json::json;
use support::wait_until;

fn deployment(name: &str) -> Deployment {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": "x"}]}}},
    }))
    .unwrap()
}

#[tokio::test]
async fn generation_and_resource_version_bookkeeping() {
    let api = FakeApi::start().await;
    let deps: Api<Deployment> = Api::namespaced(api.client().await, "ns");
    let created = deps
        .create(&PostParams::default(), &deployment("d"))
        .await
        .unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert!(created.metadata.uid.is_some());
    let rv1: u64 = created
        .metadata
        .resource_version
        .clone()
        .unwrap()
        .parse()
        .unwrap();

    // A spec change bumps generation and resourceVersion.
    let patched = deps
        .patch(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.generation, Some(2));
    let rv2: u64 = patched
        .metadata
        .resource_version
        .clone()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv2 > rv1);

    // A label change bumps resourceVersion only.
    let labelled = deps
        .patch(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(labelled.metadata.generation, Some(2));

    // /status (JSON patch) changes status only, never generation; status in
    // a main-resource write is ignored.
    let status = deps
        .patch_status(
            "d",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "add", "path": "/status", "value": {"replicas": 3}}
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(status.status.unwrap().replicas, Some(3));
    assert_eq!(status.metadata.generation, Some(2));
    let ignored = deps
        .patch(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"replicas": 9}})),
        )
        .await
        .unwrap();
    assert_eq!(ignored.status.unwrap().replicas, Some(3));

    // PUT with a stale resourceVersion: 409 Conflict.
    let mut stale = created.clone();
    stale.spec.replicas = Some(7);
    let err = deps
        .replace("d", &PostParams::default(), &stale)
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409),
        "{err:?}"
    );

    deps.delete("d", &DeleteParams::default()).await.unwrap();
    let err = deps.get("d").await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404),
        "{err:?}"
    );
}

#[tokio::test]
async fn list_honours_label_and_field_selectors_and_pages() {
    let api = FakeApi::start().await;
    for (name, ns, policy) in [("a", "x", "true"), ("b", "x", "false"), ("c", "y", "true")] {
        api.create(
            "",
            "configmaps",
            json!({"metadata": {"name": name, "namespace": ns,
                   "labels": {"knativeha.dev/policy": policy}}}),
        );
    }
    let client = api.client().await;
    let all: Api<ConfigMap> = Api::all(client.clone());
    let names = |l: kube::core::ObjectList<ConfigMap>| {
        l.items
            .into_iter()
            .map(|c| c.metadata.name.unwrap())
            .collect::<Vec<_>>()
    };
    let lp = ListParams::default().labels("knativeha.dev/policy=true");
    assert_eq!(names(all.list(&lp).await.unwrap()), ["a", "c"]);
    let lp = ListParams::default().labels("knativeha.dev/policy!=true");
    assert_eq!(names(all.list(&lp).await.unwrap()), ["b"]);
    let lp = ListParams::default().fields("metadata.name=c");
    assert_eq!(names(all.list(&lp).await.unwrap()), ["c"]);
    let in_x: Api<ConfigMap> = Api::namespaced(client, "x");
    let list = in_x.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.metadata.resource_version.as_deref(), Some("3"));
    assert_eq!(names(list), ["a", "b"]);
    let page = all.list(&ListParams::default().limit(2)).await.unwrap();
    let token = page.metadata.continue_.clone().expect("a continue token");
    assert_eq!(page.items.len(), 2);
    let rest = all
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(names(rest), ["c"]);
}

#[tokio::test]
async fn watch_streams_events_selector_transitions_and_410() {
    let api = FakeApi::start().await;
    let cms: Api<ConfigMap> = Api::namespaced(api.client().await, "ns");
    api.create(
        "",
        "configmaps",
        json!({"metadata": {"name": "seed", "namespace": "other"}}),
    );
    let start = api.resource_version().to_string();
    let wp = WatchParams::default().labels("pick=me");
    let mut stream = cms.watch(&wp, &start).await.unwrap().boxed();
    api.create(
        "",
        "configmaps",
        json!({"metadata": {"name": "a", "namespace": "ns", "labels": {"pick": "me"}}}),
    );
    api.create(
        "",
        "configmaps",
        json!({"metadata": {"name": "b", "namespace": "ns"}}),
    );
    api.update("", "configmaps", "ns", "b", |o| {
        o["metadata"]["labels"] = json!({"pick": "me"})
    });
    api.update("", "configmaps", "ns", "a", |o| {
        o["metadata"]["labels"] = json!({})
    });
    let mut seen = Vec::new();
    while seen.len() < 3 {
        match stream.next().await.unwrap().unwrap() {
            WatchEvent::Added(c) => seen.push(format!("ADDED {}", c.metadata.name.unwrap())),
            WatchEvent::Modified(c) => seen.push(format!("MODIFIED {}", c.metadata.name.unwrap())),
            WatchEvent::Deleted(c) => seen.push(format!("DELETED {}", c.metadata.name.unwrap())),
            WatchEvent::Bookmark(_) => {}
            WatchEvent::Error(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(seen, ["ADDED a", "ADDED b", "DELETED a"]);

    // After compaction, a watch from an old resourceVersion gets 410.
    api.compact();
    let mut old = cms
        .watch(&WatchParams::default(), &start)
        .await
        .unwrap()
        .boxed();
    match old.next().await.unwrap().unwrap() {
        WatchEvent::Error(e) => assert_eq!(e.code, 410),
        other => panic!("expected 410, got {other:?}"),
    }
    // Open watches can be expired too.
    api.expire_watches();
    let gone = wait_until("410 on the open watch", async || {
        futures::FutureExt::now_or_never(stream.next())
            .flatten()
            .and_then(Result::ok)
            .and_then(|e| match e {
                WatchEvent::Error(e) => Some(e.code),
                _ => None,
            })
    })
    .await;
    assert_eq!(gone, 410);
}

#[tokio::test]
async fn uninstalled_resource_is_404_and_registered_ones_are_generic() {
    let api = FakeApi::start().await;
    let client = api.client().await;
    let ar = ApiResource::erase::<knative_ha_webhook::policy::HighAvailabilityPolicy>(&());
    let haps: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
    assert!(
        haps.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    api.set_installed("knativeha.dev", "highavailabilitypolicies", false);
    let err = haps.list(&ListParams::default()).await.unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 404),
        "{err:?}"
    );

    // Leases (the reconciler's leader election) work like any other resource.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "knative-serving");
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": "l"},
        "spec": {"holderIdentity": "me"}}))
    .unwrap();
    leases.create(&PostParams::default(), &lease).await.unwrap();
    assert_eq!(
        leases
            .get("l")
            .await
            .unwrap()
            .spec
            .unwrap()
            .holder_identity
            .as_deref(),
        Some("me")
    );

    // A newly registered custom resource.
    api.register(ResourceDef::new(
        "example.dev",
        "v1",
        "widgets",
        "Widget",
        false,
        false,
    ));
    let wr = ApiResource {
        group: "example.dev".into(),
        version: "v1".into(),
        api_version: "example.dev/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    let widgets: Api<DynamicObject> = Api::all_with(client, &wr);
    let w = DynamicObject::new("w", &wr).data(json!({"spec": {"size": 1}}));
    let created = widgets.create(&PostParams::default(), &w).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(api.list("example.dev", "widgets").len(), 1);
}

#[tokio::test]
async fn stop_refuses_connections_and_restart_serves_the_same_store() {
    let api = FakeApi::start().await;
    api.create(
        "",
        "configmaps",
        json!({"metadata": {"name": "kept", "namespace": "ns"}}),
    );
    let cms: Api<ConfigMap> = Api::namespaced(api.client().await, "ns");
    assert!(cms.get("kept").await.is_ok());
    api.stop().await;
    assert!(cms.get("kept").await.is_err(), "server down: requests fail");
    api.restart().await;
    let fresh: Api<ConfigMap> = Api::namespaced(api.client().await, "ns");
    assert_eq!(
        fresh.get("kept").await.unwrap().metadata.name.as_deref(),
        Some("kept")
    );
}
