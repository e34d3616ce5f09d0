//! HorizontalPodAutoscalers (autoscaling/v2, all namespaces): which
//! Deployments are scaled by an HPA, for the engine's HPA-backed rule.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
use kube::ResourceExt;

/// What the source keeps of one HPA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HpaTarget {
    pub namespace: String,
    /// The Deployment the HPA scales (None for other target kinds).
    pub deployment: Option<String>,
}

/// The key the source tracks an HPA by (namespace/name).
pub fn key(hpa: &HorizontalPodAutoscaler) -> String {
    format!("{}/{}", hpa.namespace().unwrap_or_default(), hpa.name_any())
}

pub fn observe(hpa: &HorizontalPodAutoscaler) -> HpaTarget {
    let target = &hpa.spec.scale_target_ref;
    let deployment = (target.kind == "Deployment").then(|| target.name.clone());
    HpaTarget {
        namespace: hpa.namespace().unwrap_or_default(),
        deployment,
    }
}

/// Namespace -> Deployment names targeted by some HPA.
pub fn targets<'a>(
    hpas: impl IntoIterator<Item = &'a HpaTarget>,
) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for hpa in hpas {
        if let Some(d) = &hpa.deployment {
            out.entry(hpa.namespace.clone())
                .or_default()
                .insert(d.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hpa(ns: &str, name: &str, kind: &str, target: &str) -> HorizontalPodAutoscaler {
        serde_json::from_value(json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"maxReplicas": 5,
                     "scaleTargetRef": {"apiVersion": "apps/v1", "kind": kind, "name": target}}
        }))
        .unwrap()
    }

    #[test]
    fn deployment_targets_grouped_by_namespace_other_kinds_ignored() {
        let list = [
            hpa("knative-serving", "activator", "Deployment", "activator"),
            hpa("knative-serving", "webhook", "Deployment", "webhook"),
            hpa("knative-serving", "sts", "StatefulSet", "db"),
            hpa("other", "x", "Deployment", "y"),
        ];
        let observed: Vec<_> = list.iter().map(observe).collect();
        let t = targets(&observed);
        assert_eq!(
            t["knative-serving"].iter().cloned().collect::<Vec<_>>(),
            vec!["activator".to_string(), "webhook".to_string()]
        );
        assert_eq!(t["other"].len(), 1);
        assert_eq!(key(&list[0]), "knative-serving/activator");
    }
}
