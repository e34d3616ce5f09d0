//! What a policy does with what a namespace holds ([`Coverage`]): the
//! targets it governs, those it leaves alone and why, and the Knative
//! Operator's fields it overrides. A pass publishes it for the policy's
//! status and its metric; `audit` prints it.

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::Value;

use super::error::is_not_found;
use super::objects::Listed;
use crate::engine::standing::{Standing, standing};
use crate::engine::{Kind, Snapshot};
use crate::findings::{Coverage, Untouched};
use crate::knative_operator;

/// The coverage of the snapshot's policy for `namespace` over what was
/// listed there, with the Knative Operator's resources there (`operator`).
/// A malformed object counts as governed: the engine's error is reported
/// where it writes. Nothing where no policy governs the namespace.
pub fn coverage(
    snapshot: &Snapshot,
    namespace: &str,
    listed: &Listed,
    operator: &[Value],
) -> Coverage {
    let mut out = Coverage::default();
    let Some(policy) = snapshot.policy_for(namespace) else {
        return out;
    };
    for object in &listed.objects {
        let Some(kind) = Kind::of(object) else {
            continue;
        };
        match standing(policy, namespace, object, snapshot.facts(namespace)) {
            Ok(Standing::Untargeted) => {}
            Ok(Standing::Governed) | Err(_) => out.targets += 1,
            Ok(Standing::LeftAlone(why)) => {
                out.targets += 1;
                out.left_alone.push(Untouched {
                    kind: kind.as_str(),
                    name: object["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    why,
                });
            }
        }
    }
    out.overrides = knative_operator::overrides(policy, operator);
    out
}

/// The Knative Operator's resources (KnativeServing, KnativeEventing) in
/// `namespace`. None listed where the Operator's CRDs are not installed
/// (404) or the chart did not grant the list (403): the policy's status
/// then names no override.
pub async fn list_operator(client: &kube::Client, namespace: &str) -> Vec<Value> {
    let mut out = Vec::new();
    for (kind, plural) in knative_operator::RESOURCES {
        let gvk = GroupVersionKind::gvk(knative_operator::GROUP, knative_operator::VERSION, kind);
        let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        match api.list(&ListParams::default()).await {
            Ok(list) => out.extend(list.items.iter().filter_map(|o| {
                let mut v = serde_json::to_value(o).ok()?;
                v["kind"] = Value::String(kind.into());
                Some(v)
            })),
            Err(e) if is_not_found(&e) => {}
            Err(e) => {
                tracing::debug!(namespace, kind, error = %crate::errors::Chain(&e),
                    "reconcile: the Knative Operator's resources could not be listed; no override is named");
            }
        }
    }
    out
}
