//! Reading and writing governed objects through the API server.

use std::collections::BTreeSet;
use std::ops::ControlFlow;

use json_patch::Patch;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::{Map, Value};

use super::error::{ReconcileError, Result};
use crate::engine::{self, Kind, LEADER_ELECTION_CONFIGMAP, Snapshot, configmap};
use crate::policy::Policy;

/// The API resource a governed kind is read and written as, as its
/// [`engine::kinds::KINDS`] entry declares it (a `Scale`, the Deployment's
/// subresource seen only at admission, is read and written as its
/// Deployment).
pub fn api_resource(kind: Kind) -> ApiResource {
    let spec = kind.spec();
    let gvk = GroupVersionKind::gvk(spec.group, spec.version, spec.resource_kind);
    ApiResource::from_gvk_with_plural(&gvk, spec.plural)
}

pub(super) fn api(client: &kube::Client, kind: Kind, namespace: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), namespace, &api_resource(kind))
}

/// The object as JSON with `apiVersion` and `kind` set (list items may
/// come without them).
fn to_value(kind: Kind, obj: &DynamicObject) -> Result<Value> {
    let mut v = serde_json::to_value(obj).map_err(|source| ReconcileError::Decode {
        kind: kind.as_str(),
        source,
    })?;
    let ar = api_resource(kind);
    v["apiVersion"] = Value::String(ar.api_version);
    v["kind"] = Value::String(ar.kind);
    Ok(v)
}

/// The governed objects of one namespace.
#[derive(Clone, Debug, Default)]
pub struct Listed {
    /// `config-leader-election` first, then Deployments, HPAs and PDBs: a
    /// pass (and `restore`) writes in this order, so pods that a Deployment
    /// write starts read the new leader-election keys.
    pub objects: Vec<Value>,
    /// Deployments some listed HPA scales.
    pub hpa_targets: BTreeSet<String>,
    /// The duration keys of the listed `config-leader-election`
    /// ([`crate::engine::Facts::leader_election`]).
    pub leader_election: Option<Map<String, Value>>,
}

impl Listed {
    /// What the engine knows of `namespace`: its policy, the HPA targets
    /// listed now and those in the server's snapshot, `config-leader-election`
    /// as listed now.
    pub fn known(
        &self,
        namespace: &str,
        policy: Option<&Policy>,
        snapshot_targets: Option<&BTreeSet<String>>,
    ) -> Snapshot {
        let mut hpa_targets = self.hpa_targets.clone();
        hpa_targets.extend(snapshot_targets.into_iter().flatten().cloned());
        let leader_election = self.leader_election.clone();
        Snapshot::from_policies(policy.cloned()).knowing(namespace, hpa_targets, leader_election)
    }
}

/// The PriorityClasses that exist, where `policy` names one (none is
/// asked for otherwise); None when the API server does not say (no right to
/// list them, an error): the name is then written unchecked, as before.
pub async fn priority_classes(
    client: &kube::Client,
    policy: Option<&Policy>,
) -> Option<BTreeSet<String>> {
    use k8s_openapi::api::scheduling::v1::PriorityClass;
    let named = policy.is_some_and(|p| p.spec.priority_classes().next().is_some());
    if !named {
        return None;
    }
    let api: Api<PriorityClass> = Api::all(client.clone());
    match api.list_metadata(&ListParams::default()).await {
        Ok(list) => Some(
            list.items
                .into_iter()
                .filter_map(|pc| pc.metadata.name)
                .collect(),
        ),
        Err(e) => {
            tracing::debug!(error = %crate::errors::Chain(&e), "PriorityClasses not listed; the policy's name is written unchecked");
            None
        }
    }
}

/// Objects per list request: a namespace with thousands of objects is read
/// in pages (`limit` + `continue`), never as one huge response.
pub const PAGE_SIZE: u32 = 500;

/// Every object of `kind` in `namespace`, page by page.
async fn list_all(
    client: &kube::Client,
    kind: Kind,
    namespace: &str,
) -> Result<Vec<DynamicObject>> {
    let api = api(client, kind, namespace);
    let mut items = Vec::new();
    let mut params = ListParams::default().limit(PAGE_SIZE);
    loop {
        let page = api
            .list(&params)
            .await
            .map_err(|source| ReconcileError::Api {
                action: "list",
                kind,
                namespace: namespace.to_string(),
                name: String::new(),
                source: Box::new(source),
            })?;
        items.extend(page.items);
        match page.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(items),
        }
    }
}

/// Lists the governed objects of `namespace`, in [`Listed::objects`]'s order.
pub async fn list_namespace(client: &kube::Client, namespace: &str) -> Result<Listed> {
    let mut listed = Listed::default();
    let cm = get(
        client,
        Kind::ConfigMap,
        namespace,
        LEADER_ELECTION_CONFIGMAP,
    )
    .await?;
    if let Some(cm) = cm {
        listed.leader_election = Some(configmap::context_data(&cm));
        listed.objects.push(cm);
    }
    // The listing below holds every HPA of the namespace.
    listed.hpa_targets.insert(engine::HPAS_LISTED.to_string());
    // config-leader-election, the one ConfigMap governed, is read above.
    for kind in engine::kinds::listed().filter(|k| *k != Kind::ConfigMap) {
        for item in &list_all(client, kind, namespace).await? {
            let v = to_value(kind, item)?;
            let scales = &v["spec"]["scaleTargetRef"];
            if kind == Kind::HorizontalPodAutoscaler
                && scales["kind"] == "Deployment"
                && let Some(target) = scales["name"].as_str()
            {
                let skipped = engine::carries_skip_label(&v);
                listed
                    .hpa_targets
                    .insert(engine::hpa_target_entry(target, skipped));
            }
            listed.objects.push(v);
        }
    }
    Ok(listed)
}

/// Reads one object; `None` when it does not exist.
pub async fn get(
    client: &kube::Client,
    kind: Kind,
    namespace: &str,
    name: &str,
) -> Result<Option<Value>> {
    let obj = api(client, kind, namespace)
        .get_opt(name)
        .await
        .map_err(|source| ReconcileError::Api {
            action: "get",
            kind,
            namespace: namespace.to_string(),
            name: name.to_string(),
            source: Box::new(source),
        })?;
    obj.as_ref().map(|o| to_value(kind, o)).transpose()
}

/// The field manager of every write the reconciler sends: `managedFields`
/// tell its changes apart from the ones made at admission.
pub const FIELD_MANAGER: &str = "knative-ha-webhook-reconciler";

/// How often the hand-back is tried on a fresh read after another writer
/// (the Knative Operator's pass, a GitOps sync) changed the object between
/// the write and the hand-back.
const HAND_BACK_ATTEMPTS: u32 = 3;

/// Sends a JSON patch (RFC 6902) to `before`, as `manager`, then
/// hands each field the write took from another manager back to it
/// ([`super::ownership`]): the release's next server-side apply does not
/// conflict with the reconciler or `restore`. The hand-back rewrites
/// `managedFields` with a `test` of the resourceVersion read; when another
/// writer changed the object in between (the `test` fails: 422, or 409),
/// the object is read again and the fields still with `manager` are handed
/// back on that version. The object the API server stored.
pub async fn patch(
    client: &kube::Client,
    kind: Kind,
    before: &Value,
    patch: &Patch,
    manager: &str,
) -> Result<Value, kube::Error> {
    let namespace = before["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = before["metadata"]["name"].as_str().unwrap_or_default();
    let written = patch_as(client, kind, namespace, name, patch, manager).await?;
    let mut current = written.clone();
    for attempt in 1..=HAND_BACK_ATTEMPTS {
        let Some(entries) = super::ownership::handed_back(before, &current, manager) else {
            return Ok(current);
        };
        let body: Patch = serde_json::from_value(serde_json::json!([
            {"op": "test", "path": "/metadata/resourceVersion",
             "value": current["metadata"]["resourceVersion"]},
            {"op": "replace", "path": "/metadata/managedFields", "value": entries},
        ]))
        .map_err(kube::Error::SerdeError)?;
        let error = match patch_as(client, kind, namespace, name, &body, manager).await {
            Ok(stored) => return Ok(stored),
            Err(e) => e,
        };
        if !super::error::is_precondition_failed(&error) || attempt == HAND_BACK_ATTEMPTS {
            tracing::warn!(kind = kind.as_str(), namespace, name, attempts = attempt, error = %crate::errors::Chain(&error),
                "reconcile: written, but the fields it took from the release's manager stay with the reconciler");
            break;
        }
        tracing::debug!(
            kind = kind.as_str(),
            namespace,
            name,
            attempt,
            "reconcile: the object changed before its fields were handed back; reading it again"
        );
        match get(client, kind, namespace, name).await {
            Ok(Some(fresh)) => current = fresh,
            Ok(None) => break,
            Err(e) => {
                tracing::warn!(kind = kind.as_str(), namespace, name, error = %crate::errors::Chain(&e),
                    "reconcile: written, but reading it again for the hand-back failed; the fields it took from the release's manager stay with the reconciler");
                break;
            }
        }
    }
    Ok(written)
}

/// Sends a JSON patch (RFC 6902) to one object as `field_manager`; the
/// object the API server stored.
pub async fn patch_as(
    client: &kube::Client,
    kind: Kind,
    namespace: &str,
    name: &str,
    patch: &Patch,
    field_manager: &str,
) -> Result<Value, kube::Error> {
    let api = api(client, kind, namespace);
    let body = serde_json::to_vec(patch).map_err(kube::Error::SerdeError)?;
    let request = hyper::Request::builder()
        .method(hyper::Method::PATCH)
        .uri(format!(
            "{}/{}?fieldManager={field_manager}",
            api.resource_url(),
            name
        ))
        .header(hyper::header::CONTENT_TYPE, "application/json-patch+json")
        .header(hyper::header::ACCEPT, "application/json")
        .body(body)
        .map_err(kube::Error::HttpError)?;
    client.request::<Value>(request).await
}

/// Attempts per object: the first write plus retries after a guarded
/// write lost the race (a 409 or 422).
pub const MAX_ATTEMPTS: u32 = 4;

/// Why [`write_retrying`] gave up on an object.
#[derive(Debug, thiserror::Error)]
pub enum RetryError {
    /// Reading the object again after a conflict failed.
    #[error(transparent)]
    Reread(ReconcileError),
    /// Every attempt lost a race; the source is the last one's reason.
    #[error("{attempts} conflicting attempts")]
    Conflicts {
        attempts: u32,
        #[source]
        last: crate::errors::InWords,
    },
}

/// What [`write_retrying`] does to an object on each attempt: plan it and
/// write the patch (guarded by a `test` of its resourceVersion).
pub trait Attempts {
    /// What a finished attempt answers.
    type Answer;
    /// One attempt on `current`, the `n`th (from 1): `Break` with the
    /// answer when written (or nothing, or nothing more, to write),
    /// `Continue` with the reason (in words) when the guarded write lost a
    /// race with another writer: the object is read again and tried again.
    fn attempt(
        &mut self,
        current: &Value,
        n: u32,
    ) -> impl Future<Output = ControlFlow<Self::Answer, String>> + Send;
}

/// The one write-and-retry loop of the reconciler and `restore`:
/// `attempts` plans and writes `object`, the `kind` `namespace/name`, at
/// most [`MAX_ATTEMPTS`] times in all. The last attempt's answer; None
/// when, read again, the object was gone.
pub async fn write_retrying<A: Attempts>(
    client: &kube::Client,
    (kind, namespace, name): (Kind, &str, &str),
    object: &Value,
    attempts: &mut A,
) -> std::result::Result<Option<A::Answer>, RetryError> {
    let mut current = object.clone();
    let mut last = String::new();
    for n in 1..=MAX_ATTEMPTS {
        if n > 1 {
            current = match get(client, kind, namespace, name).await {
                Ok(Some(object)) => object,
                Ok(None) => return Ok(None),
                Err(e) => return Err(RetryError::Reread(e)),
            };
        }
        match attempts.attempt(&current, n).await {
            ControlFlow::Break(answer) => return Ok(Some(answer)),
            ControlFlow::Continue(why) => last = why,
        }
    }
    Err(RetryError::Conflicts {
        attempts: MAX_ATTEMPTS,
        last: crate::errors::InWords(last),
    })
}
