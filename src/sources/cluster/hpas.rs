//! HorizontalPodAutoscalers (autoscaling/v2), watched per governed
//! namespace: which Deployments are scaled by an HPA, for the engine's
//! HPA-backed rule.
//!
//! Only `metadata` (name, namespace, resourceVersion, the opt-out label) and
//! `spec.scaleTargetRef` are parsed ([`HpaRef`]); the HPA controller's
//! status rewrites (every HPA about every 15 s) cost one small parse and
//! change nothing: each watcher folds its events into its own
//! `WatchTargets` in its task and tells the state only when the
//! namespace's targets change or its first list completes (`HpaUpdate`),
//! so a status update neither wakes the state task nor publishes.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde::{Deserialize, Deserializer};

use super::{Item, WatchEvent};

/// The parts of an HPA the source reads.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct HpaRef {
    #[serde(deserialize_with = "lite_metadata", default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: HpaRefSpec,
}

/// `spec` of an HPA, reduced to its target.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HpaRefSpec {
    #[serde(default)]
    pub scale_target_ref: TargetRef,
}

/// `spec.scaleTargetRef` (kind and name).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct TargetRef {
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
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
        .and_then(|mut l| l.remove_entry(crate::engine::SKIP_LABEL))
        .map(|(k, v)| BTreeMap::from([(k, v)]));
    Ok(ObjectMeta {
        name: lite.name,
        namespace: lite.namespace,
        resource_version: lite.resource_version,
        labels,
        ..ObjectMeta::default()
    })
}

impl Resource for HpaRef {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "HorizontalPodAutoscaler".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "autoscaling".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v2".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "horizontalpodautoscalers".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// What the source keeps of one HPA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HpaTarget {
    pub namespace: String,
    /// The Deployment the HPA scales (None for other target kinds).
    pub deployment: Option<String>,
}

/// The key the source tracks an HPA by (its name; watches are per
/// namespace) and what it keeps of it, the strings moved rather than
/// copied (once per event).
pub fn into_parts(hpa: HpaRef) -> (String, HpaTarget) {
    let HpaRef { metadata, spec } = hpa;
    let target = spec.scale_target_ref;
    let skipped = metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(crate::engine::SKIP_LABEL))
        .is_some_and(|v| v == "true");
    // The name moved, not copied (once per event), unless it gets the mark.
    let deployment = (target.kind == "Deployment").then(|| {
        if skipped {
            crate::engine::hpa_target_entry(&target.name, true)
        } else {
            target.name
        }
    });
    (
        metadata.name.unwrap_or_default(),
        HpaTarget {
            namespace: metadata.namespace.unwrap_or_default(),
            deployment,
        },
    )
}

/// The HPAs of one namespace and the Deployments they target, kept up to
/// date one HPA at a time (O(log n) per change).
#[derive(Debug, Default)]
pub struct NamespaceTargets {
    /// HPA name -> the Deployment it targets (hashed: looked up on every
    /// event, never iterated).
    by_hpa: HashMap<String, Option<String>>,
    /// Deployment -> how many HPAs target it.
    counts: BTreeMap<String, usize>,
}

impl NamespaceTargets {
    /// Sets (`Some`) or removes (`None`) one HPA's target; true when the set
    /// of targeted Deployments changed.
    pub fn apply(&mut self, hpa: &str, target: Option<Option<String>>) -> bool {
        let old = match &target {
            // A known HPA (every status update): no new key.
            Some(t) => match self.by_hpa.get_mut(hpa) {
                Some(slot) if slot == t => return false,
                Some(slot) => Some(std::mem::replace(slot, t.clone())),
                None => self.by_hpa.insert(hpa.to_string(), t.clone()),
            },
            None => self.by_hpa.remove(hpa),
        };
        let new = target.flatten();
        let old = old.flatten();
        if old == new {
            return false;
        }
        let mut changed = false;
        if let Some(d) = old
            && let Some(n) = self.counts.get_mut(&d)
        {
            *n -= 1;
            if *n == 0 {
                self.counts.remove(&d);
                changed = true;
            }
        }
        if let Some(d) = new {
            let n = self.counts.entry(d).or_insert(0);
            *n += 1;
            changed |= *n == 1;
        }
        changed
    }

    /// Replaces everything (after a relist); true when the targets changed.
    pub fn replace(&mut self, hpas: BTreeMap<String, Option<String>>) -> bool {
        let before = self.targets();
        self.by_hpa.clear();
        self.counts.clear();
        for (name, target) in hpas {
            self.apply(&name, Some(target));
        }
        before != self.targets()
    }

    /// The Deployments some HPA of the namespace targets.
    pub fn targets(&self) -> BTreeSet<String> {
        self.counts.keys().cloned().collect()
    }
}

/// What an HPA watcher tells the state: the namespace's targeted
/// Deployments when they changed, and whether its first list completed.
pub(crate) type HpaUpdate = super::namespace_watches::Update<BTreeSet<String>>;

/// One HPA watcher's view of its namespace, kept in the watcher's task:
/// the targets, a relist in progress, whether the first list completed.
#[derive(Debug, Default)]
pub(crate) struct WatchTargets {
    targets: NamespaceTargets,
    /// A relist in progress: HPA name -> target.
    pending: Option<BTreeMap<String, Option<String>>>,
    synced: bool,
}

impl WatchTargets {
    /// Folds one watcher change in; the update for the state, or None when
    /// the targets did not change and no first list completed (a status
    /// update, a relist's objects). O(log n) for an event.
    pub(crate) fn apply(&mut self, change: WatchEvent) -> Option<HpaUpdate> {
        let target = |item: Item| match item {
            Item::Hpa(t) => Some(t.deployment),
            Item::Policy(_) | Item::LeaderElection(_) | Item::Budget(_) | Item::PriorityClass => {
                None
            }
        };
        let mut first_list = false;
        let changed = match change {
            WatchEvent::Init => {
                self.pending = Some(BTreeMap::new());
                false
            }
            WatchEvent::InitApply(name, item) => {
                if let Some(t) = target(item) {
                    self.pending
                        .get_or_insert_with(BTreeMap::new)
                        .insert(name, t);
                }
                false
            }
            WatchEvent::InitDone => {
                first_list = !self.synced;
                self.synced = true;
                let listed = self.pending.take().unwrap_or_default();
                self.targets.replace(listed)
            }
            WatchEvent::Apply(name, item) => match target(item) {
                Some(t) => self.targets.apply(&name, Some(t)),
                None => false,
            },
            WatchEvent::Delete(name) => self.targets.apply(&name, None),
            WatchEvent::Missing => {
                first_list = !self.synced;
                self.synced = true;
                self.targets.replace(BTreeMap::new())
            }
        };
        (changed || first_list).then(|| HpaUpdate {
            value: Some(self.published()),
            first_list,
        })
    }

    /// The targets as the engine's context holds them: once the first list
    /// completed, with [`crate::engine::HPAS_LISTED`] (every HPA is known).
    fn published(&self) -> BTreeSet<String> {
        let mut out = self.targets.targets();
        if self.synced {
            out.insert(crate::engine::HPAS_LISTED.to_string());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt;
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
        assert_eq!(
            into_parts(h),
            (
                "activator".to_string(),
                HpaTarget {
                    namespace: "knative-serving".into(),
                    deployment: Some("activator".into())
                }
            )
        );
        let (key, sts) = into_parts(hpa("ns", "s", "StatefulSet", "db"));
        assert_eq!(key, "s");
        assert_eq!(sts.deployment, None);
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
            into_parts(read).1.deployment.as_deref(),
            Some("knativeha.dev/skipped-hpa:activator")
        );
    }

    #[test]
    fn incremental_targets_report_only_real_changes() {
        let mut t = NamespaceTargets::default();
        assert!(t.apply("a", Some(Some("activator".into()))));
        assert!(!t.apply("a", Some(Some("activator".into()))), "same target");
        assert!(!t.apply("a2", Some(Some("activator".into()))), "second HPA");
        assert!(!t.apply("a", None), "still targeted by a2");
        assert!(t.apply("a2", None), "no HPA left on activator");
        assert!(t.targets().is_empty());
        assert!(!t.apply("s", Some(None)), "non-Deployment target");
        assert!(t.apply("s", Some(Some("webhook".into()))), "retargeted");
        assert!(t.apply("s", Some(Some("controller".into()))));
        assert_eq!(t.targets(), ["controller".to_string()].into());
        let relist: BTreeMap<_, _> = [("s".to_string(), Some("controller".to_string()))].into();
        assert!(!t.replace(relist));
        assert!(t.replace(BTreeMap::new()));
    }
}
