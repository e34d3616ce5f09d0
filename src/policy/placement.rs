//! Placement choices a policy may make that strand replicas: Required
//! anti-affinity over more replicas than a cluster may have domains for
//! (`check` warns; the engine warns at admission).

use super::HighAvailabilityPolicySpec;

/// Where Required anti-affinity can strand replicas: each Deployment (or,
/// for the global setting, every Deployment without an HPA) that gets it
/// with more than one replica, as `(field path, Deployments, replicas,
/// topology key)`. HPA-scaled Deployments get Preferred instead.
pub fn stranding(spec: &HighAvailabilityPolicySpec) -> Vec<(String, String, i32, String)> {
    use super::AntiAffinityType::Required;
    let mut out = Vec::new();
    let global = spec.pod_anti_affinity.as_ref();
    if let (Some(aa), Some(n)) = (global, spec.replicas)
        && aa.kind == Required
        && n > 1
    {
        out.push((
            "spec.podAntiAffinity".to_string(),
            "every governed Deployment without an HPA".to_string(),
            n,
            aa.topology_key().to_string(),
        ));
    }
    for (i, w) in spec.workloads.iter().enumerate() {
        let own = w.pod_anti_affinity.as_ref();
        let (Some(aa), Some(n)) = (own.or(global), w.replicas.or(spec.replicas)) else {
            continue;
        };
        let scaled = crate::knative::is_hpa_scaled(&w.name);
        if aa.kind == Required && n > 1 && !scaled && (own.is_some() || w.replicas.is_some()) {
            let at = own.map_or("replicas", |_| "podAntiAffinity");
            out.push((
                format!("spec.workloads[{i}].{at}"),
                format!("deployment/{}", w.name),
                n,
                aa.topology_key().to_string(),
            ));
        }
    }
    out
}
