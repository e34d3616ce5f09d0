//! The policies in force in the cluster, for `audit` without
//! `--policy-file`: one list of each policy source, merged with the
//! cluster source's rules.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use kube::api::{DynamicObject, ListParams};

use super::{AuditError, Result};
use crate::errors::InWords;
use crate::kubeclient::describe;
use crate::policy::Policy;
use crate::reconcile::error;
use crate::sources::cluster::{configmaps, merge, policies};

/// The policies in force in the cluster (one-shot list, cluster rules).
pub async fn cluster_policies(
    client: &kube::Client,
    webhook_namespace: Option<&str>,
) -> Result<(Vec<(Arc<Policy>, String)>, Vec<String>)> {
    let resource = policies::api_resource();
    let crs: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let cr_list = match crs.list(&ListParams::default()).await {
        Ok(l) => l.items,
        // The CRD not being installed: ConfigMaps alone.
        Err(e) if error::is_not_found(&e) => Vec::new(),
        Err(source) => {
            return Err(AuditError::List {
                what: "HighAvailabilityPolicy resources",
                reason: InWords(describe(&source)),
            });
        }
    };
    let cms: Api<ConfigMap> = match webhook_namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let cm_list = cms
        .list(&ListParams::default().labels(configmaps::LABEL_SELECTOR))
        .await
        .map_err(|source| AuditError::List {
            what: "policy ConfigMaps",
            reason: InWords(describe(&source)),
        })?
        .items;
    let crs = cr_list.iter().map(policies::observe);
    let observed = crs.chain(cm_list.iter().map(configmaps::observe));
    let objects: Vec<_> = observed
        .map(|o| {
            let mut object = o.object;
            match o.parsed {
                Ok(p) => object.last_valid = Some(Arc::new(p)),
                Err(e) => object.error = Some(e.to_string()),
            }
            object
        })
        .collect();
    let merged = merge::merge(&objects);
    let warnings = objects.iter().filter_map(|obj| {
        match merged.verdicts.get(&(obj.origin, obj.uid.clone()))? {
            merge::Verdict::Invalid { message, .. } => {
                Some(format!("{}: invalid, not applied: {message}", display(obj)))
            }
            merge::Verdict::Conflict { namespace, winner } => Some(format!(
                "{}: in conflict with {winner} for namespace {namespace}, not applied",
                display(obj)
            )),
            _ => None,
        }
    });
    // Each policy in force, with where it comes from (its namespace's winner).
    let winners = &merged.winners;
    let source = |ns| winners.get(ns).map_or(String::new(), |(_, w)| w.clone());
    let in_force = merged
        .policies
        .iter()
        .map(|(ns, p)| (p.clone(), source(ns)));
    Ok((in_force.collect(), warnings.collect()))
}

fn display(obj: &merge::PolicyObject) -> String {
    match &obj.namespace {
        Some(ns) => format!("{}/{ns}/{}", obj.origin.kind(), obj.name),
        None => obj.display(),
    }
}
