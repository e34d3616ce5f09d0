//! HorizontalPodAutoscalers (autoscaling/v2), watched per namespace with a
//! policy in force (`namespace_watches`): which Deployments are
//! scaled by an HPA, for the engine's HPA-backed rule.
//!
//! Only `metadata` (name, namespace, resourceVersion, the opt-out label) and
//! `spec.scaleTargetRef` are parsed ([`HpaRef`]): the HPA controller's
//! status rewrites (every HPA about every 15 s) cost one small parse, and
//! change no target, so they neither wake the state task nor publish.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::autoscaling::v2::{CrossVersionObjectReference, HorizontalPodAutoscaler};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Api, ResourceExt};
use serde::{Deserialize, Deserializer};

use super::namespace_watches::{Kind, NamespaceWatches, Update};
use super::{Msg, Source};
use crate::engine::SKIP_LABEL;

/// Every HPA watch and the targets per namespace.
pub(crate) type HpaWatches = NamespaceWatches<BTreeSet<String>>;

/// What the HPA watches are logged as.
pub(crate) const WHAT: &str = "HorizontalPodAutoscalers";

/// The parts of an HPA the source reads.
#[derive(Clone, Debug, Default, Deserialize, kube::Resource)]
#[resource(inherit = HorizontalPodAutoscaler)]
#[serde(default)]
pub struct HpaRef {
    #[serde(deserialize_with = "lite_metadata")]
    pub metadata: ObjectMeta,
    pub spec: HpaRefSpec,
}

/// `spec` of an HPA, reduced to its target.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct HpaRefSpec {
    pub scale_target_ref: CrossVersionObjectReference,
}

/// Reads only name, namespace, resourceVersion and the opt-out label of
/// `metadata` (the rest, `managedFields` included, is skipped without
/// building anything).
fn lite_metadata<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Lite {
        name: Option<String>,
        namespace: Option<String>,
        resource_version: Option<String>,
        labels: Option<BTreeMap<String, String>>,
    }
    let lite = Lite::deserialize(d)?;
    let labels = lite
        .labels
        .and_then(|mut l| l.remove_entry(SKIP_LABEL))
        .map(|(k, v)| BTreeMap::from([(k, v)]));
    Ok(ObjectMeta {
        name: lite.name,
        namespace: lite.namespace,
        resource_version: lite.resource_version,
        labels,
        ..ObjectMeta::default()
    })
}

/// The Deployment an HPA scales (None for other target kinds), marked
/// when the HPA opts out ([`crate::engine::hpa_target_entry`]).
pub fn target(hpa: &HpaRef) -> Option<String> {
    let target = &hpa.spec.scale_target_ref;
    let skipped = hpa.labels().get(SKIP_LABEL).is_some_and(|v| v == "true");
    (target.kind == "Deployment").then(|| crate::engine::hpa_target_entry(&target.name, skipped))
}

/// What an HPA watcher tells the state: the namespace's targeted
/// Deployments when they changed, and whether its first list completed.
pub(crate) type HpaUpdate = Update<BTreeSet<String>>;

impl Kind for HpaRef {
    const SOURCE: Source = Source::Hpas;
    type Counts = String;
    /// The targets as the engine's context holds them: with
    /// [`crate::engine::HPAS_LISTED`] (sent only once listed: every HPA is
    /// known).
    type Value = BTreeSet<String>;

    fn api(client: kube::Client, namespace: &str) -> Api<HpaRef> {
        Api::namespaced(client, namespace)
    }
    fn counts(&self) -> Option<String> {
        target(self)
    }
    fn value(objects: &[Arc<HpaRef>]) -> BTreeSet<String> {
        let listed = crate::engine::HPAS_LISTED.to_string();
        let targets = objects.iter().filter_map(|h| target(h));
        targets.chain([listed]).collect()
    }
    fn msg(namespace: String, id: u64, update: HpaUpdate) -> Msg {
        Msg::Hpa {
            namespace,
            id,
            update,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::cluster::namespace_watches::Fold;
    use crate::sources::cluster::namespace_watches::tests::NoSpawn;
    use kube::ResourceExt;
    use kube::runtime::watcher::Event;
    use serde_json::json;

    fn hpa(ns: &str, name: &str, kind: &str, target: &str) -> HpaRef {
        serde_json::from_value(json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": "7",
                         "managedFields": [{"manager": "kube-controller-manager"}]},
            "spec": {"maxReplicas": 5,
                     "scaleTargetRef": {"apiVersion": "apps/v1", "kind": kind, "name": target}},
            "status": {"currentReplicas": 2, "desiredReplicas": 3}
        }))
        .unwrap()
    }

    #[test]
    fn reads_metadata_and_target_only() {
        let h = hpa("knative-serving", "activator", "Deployment", "activator");
        assert_eq!(h.resource_version().as_deref(), Some("7"));
        assert!(h.metadata.managed_fields.is_none());
        assert_eq!(h.metadata.name.as_deref(), Some("activator"));
        assert_eq!(h.metadata.namespace.as_deref(), Some("knative-serving"));
        assert_eq!(target(&h).as_deref(), Some("activator"));
        let sts = hpa("ns", "s", "StatefulSet", "db");
        assert_eq!(sts.metadata.name.as_deref(), Some("s"));
        assert_eq!(target(&sts), None);
    }

    #[test]
    fn an_opted_out_hpa_marks_its_target() {
        let read: HpaRef = serde_json::from_value(json!({
            "metadata": {"name": "activator", "namespace": "knative-serving",
                         "labels": {"knativeha.dev/skip": "true", "app": "activator"}},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "activator"}}
        }))
        .unwrap();
        let kept = read.metadata.labels.as_ref().map(BTreeMap::len);
        assert_eq!(kept, Some(1), "only the opt-out label is kept");
        assert_eq!(
            target(&read).as_deref(),
            Some("knativeha.dev/skipped-hpa:activator")
        );
    }

    const NS: &str = "knative-serving";

    fn apply(name: &str, kind: &str, to: &str) -> Event<HpaRef> {
        Event::Apply(hpa(NS, name, kind, to))
    }

    fn delete(name: &str) -> Event<HpaRef> {
        Event::Delete(hpa(NS, name, "Deployment", ""))
    }

    /// A watcher's fold after its first list (of nothing).
    fn listed_fold() -> Fold<HpaRef> {
        let mut seen = Fold::default();
        seen.apply(Event::Init);
        assert!(seen.apply(Event::InitDone).is_some_and(|u| u.first_list));
        seen
    }

    #[test]
    fn incremental_targets_report_only_real_changes() {
        let mut t = listed_fold();
        let mut changed = |e| t.apply(e).is_some();
        assert!(changed(apply("a", "Deployment", "activator")));
        assert!(
            !changed(apply("a", "Deployment", "activator")),
            "same target"
        );
        assert!(
            !changed(apply("a2", "Deployment", "activator")),
            "second HPA"
        );
        assert!(!changed(delete("a")), "still targeted by a2");
        assert!(changed(delete("a2")), "no HPA left on activator");
        assert!(
            !changed(apply("s", "StatefulSet", "db")),
            "non-Deployment target"
        );
        assert!(changed(apply("s", "Deployment", "webhook")), "retargeted");
        let update = t.apply(apply("s", "Deployment", "controller"));
        assert_eq!(update.and_then(|u| u.value), Some(listed(&["controller"])));
        t.apply(Event::Init);
        t.apply(Event::InitApply(hpa(NS, "s", "Deployment", "controller")));
        assert_eq!(t.apply(Event::InitDone), None, "the same relisted");
        t.apply(Event::Init);
        assert!(t.apply(Event::InitDone).is_some(), "an empty relist");
    }

    /// One event through a watcher's fold and, when it sends anything,
    /// the state's watches: (targets changed, first list completed).
    fn feed(
        w: &mut HpaWatches,
        seen: &mut Fold<HpaRef>,
        id: u64,
        event: Event<HpaRef>,
    ) -> (bool, bool) {
        match seen.apply(event) {
            Some(update) => w.apply(NS, id, update),
            None => (false, false),
        }
    }

    #[test]
    fn watches_follow_the_namespaces_and_stale_messages_are_dropped() {
        let mut w = HpaWatches::new(WHAT, Box::new(NoSpawn));
        let serving = NS.to_string();
        assert!(!w.set([&serving]));
        assert!(!w.synced());
        let mut seen = Fold::default();
        assert_eq!(seen.apply(Event::Init), None, "a list starts: nothing sent");
        assert_eq!(
            seen.apply(Event::InitApply(hpa(NS, "a", "Deployment", "activator"))),
            None,
            "a listed object: nothing sent"
        );
        assert_eq!(feed(&mut w, &mut seen, 1, Event::InitDone), (true, true));
        assert!(w.synced());
        assert_eq!(w.values()[&serving], listed(&["activator"]));
        // Same target again (a status update): the watcher sends nothing.
        assert_eq!(seen.apply(apply("a", "Deployment", "activator")), None);
        // Policy gone: watch stopped, targets dropped.
        assert!(w.set([]));
        assert!(w.values().is_empty());
        // Back: a new watcher (id 2); the old one's leftovers are ignored.
        w.set([&serving]);
        let stale = seen.apply(apply("b", "Deployment", "webhook"));
        assert!(stale.is_some(), "the old watcher saw a new target");
        assert_eq!(w.apply(NS, 1, stale.unwrap()), (false, false));
        assert!(w.values().is_empty());
        assert!(!w.synced());
        let mut seen = Fold::default();
        seen.apply(Event::Init);
        // An empty namespace, listed: the engine learns there is no HPA at all.
        assert_eq!(feed(&mut w, &mut seen, 2, Event::InitDone), (true, true));
        assert_eq!(w.values()[&serving], listed(&[]));
        assert!(w.synced());
        let apply_b = apply("b", "Deployment", "webhook");
        assert!(feed(&mut w, &mut seen, 2, apply_b).0);
        assert_eq!(w.values()[&serving], listed(&["webhook"]));
        assert!(feed(&mut w, &mut seen, 2, delete("b")).0);
        assert_eq!(w.values()[&serving], listed(&[]));
    }

    /// What the state holds for a listed namespace: its targets and the
    /// mark that every HPA is known.
    fn listed(targets: &[&str]) -> BTreeSet<String> {
        targets
            .iter()
            .map(|t| t.to_string())
            .chain([crate::engine::HPAS_LISTED.to_string()])
            .collect()
    }

    #[test]
    fn a_relist_sends_only_what_changed() {
        let mut seen = Fold::<HpaRef>::default();
        seen.apply(Event::Init);
        seen.apply(Event::InitApply(hpa(NS, "a", "Deployment", "activator")));
        let first = seen.apply(Event::InitDone).expect("first list");
        assert!(first.first_list);
        // A relist (after 410 Gone) with the same objects: nothing sent.
        seen.apply(Event::Init);
        seen.apply(Event::InitApply(hpa(NS, "a", "Deployment", "activator")));
        assert_eq!(seen.apply(Event::InitDone), None);
        // A relist that misses a deletion: the new targets, not a first list.
        seen.apply(Event::Init);
        assert_eq!(
            seen.apply(Event::InitDone),
            Some(HpaUpdate {
                value: Some(listed(&[])),
                first_list: false
            })
        );
    }
}
