//! What a valid policy reaches beyond Knative's control plane: a target
//! namespace of the cluster's own (`kube-system`, ...), or a PriorityClass
//! Kubernetes keeps for the cluster's critical pods. Neither is wrong as
//! such, so both are warnings (`check`, the validating webhook), said
//! before the policy takes effect.

use super::HighAvailabilityPolicySpec;

/// Namespaces of the cluster itself: governing one puts the webhook in the
/// path of the cluster's own components.
const SYSTEM_NAMESPACES: &[&str] = &["kube-system", "kube-public", "kube-node-lease", "default"];

/// The PriorityClasses Kubernetes creates for its own critical pods.
const SYSTEM_PRIORITY_CLASSES: &[&str] = &["system-cluster-critical", "system-node-critical"];

/// The warnings of `spec` about what it reaches, each with its field.
pub fn warnings(spec: &HighAvailabilityPolicySpec) -> Vec<String> {
    let mut out = Vec::new();
    let ns = spec.target_namespace.as_str();
    if SYSTEM_NAMESPACES.contains(&ns) || ns.starts_with("kube-") {
        out.push(format!(
            "spec.targetNamespace: {ns:?} is a namespace of the cluster itself, not Knative's: the webhook (and, with failurePolicy Fail, its availability) would be in the path of every Deployment, HPA and PDB written there"
        ));
    }
    for (path, c) in spec.priority_classes() {
        if SYSTEM_PRIORITY_CLASSES.contains(&c) {
            out.push(format!(
                "{path}: {c:?} is kept for the cluster's critical pods (the scheduler evicts other pods for them, and the kubelet keeps them last under node pressure); a PriorityClass of your own above ordinary workloads (examples/priorityclass.yaml) keeps Knative's control plane ahead without that"
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Policy;

    #[test]
    fn a_system_namespace_or_priority_class_is_warned_about() {
        let p = Policy::serving_with("  replicas: 3\n");
        assert_eq!(warnings(&p.spec), Vec::<String>::new());
        let mut spec = p.spec.clone();
        spec.target_namespace = "kube-system".into();
        spec.priority_class_name = Some("system-node-critical".into());
        let w = warnings(&spec);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].starts_with("spec.targetNamespace: \"kube-system\""),
            "{w:?}"
        );
        assert!(
            w[1].starts_with("spec.priorityClassName: \"system-node-critical\""),
            "{w:?}"
        );
    }
}
