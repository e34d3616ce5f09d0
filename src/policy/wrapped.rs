//! The forms a policy document comes in besides the resource itself: a
//! policy ConfigMap (labelled `knativeha.dev/policy: "true"`, the document
//! under the data key `policy.yaml`) and a `kind: List` or
//! `HighAvailabilityPolicyList` of either (what `kubectl get -o yaml`
//! prints). Every command that reads a policy file unwraps them so.

use serde_json::Value;

use super::PolicyError;
use super::objects::{DATA_KEY, POLICY_LABEL, configmap_document, is_policy_configmap};

/// One policy document found in a YAML document, before validation.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Found {
    /// 1-based index in the document's `items` when the document is a list.
    pub item: Option<usize>,
    /// `NAMESPACE/NAME` of the policy ConfigMap the document came in.
    pub configmap: Option<String>,
    /// The HighAvailabilityPolicy document; `None` when the ConfigMap holds
    /// none that parses.
    pub document: Option<Value>,
    /// What is wrong around the document (its ConfigMap).
    pub errors: Vec<PolicyError>,
}

impl Found {
    /// An error of the document, placed in its ConfigMap's data key (if any).
    pub fn in_configmap(&self, error: PolicyError) -> PolicyError {
        match &self.configmap {
            Some(id) => error.at(format!("ConfigMap {id}: data.{DATA_KEY}")),
            None => error,
        }
    }
}

/// A list with no items (`kubectl get` of nothing).
pub fn is_empty_list(value: &Value) -> bool {
    crate::manifest::is_list(value) && crate::manifest::list_items(value).is_empty()
}

/// The policy documents of one YAML document, in order: the document itself,
/// the policy of a ConfigMap, or those of a list's items.
pub fn unwrap(value: Value) -> Vec<Found> {
    if crate::manifest::is_list(&value) {
        return crate::manifest::list_items(&value)
            .into_iter()
            .enumerate()
            .map(|(i, item)| Found {
                item: Some(i + 1),
                ..one(item)
            })
            .collect();
    }
    vec![one(value)]
}

fn one(value: Value) -> Found {
    if value["apiVersion"] == "v1" && value["kind"] == "ConfigMap" {
        return configmap(&value);
    }
    Found {
        document: Some(value),
        ..Found::default()
    }
}

/// A policy ConfigMap: labelled, with a policy document under `policy.yaml`.
fn configmap(cm: &Value) -> Found {
    let meta = &cm["metadata"];
    let name = meta["name"].as_str().unwrap_or("");
    let id = match meta["namespace"].as_str().unwrap_or("") {
        "" => name.to_string(),
        ns => format!("{ns}/{name}"),
    };
    let mut errors = Vec::new();
    if !is_policy_configmap(cm) {
        let (key, value) = POLICY_LABEL;
        errors.push(PolicyError::invalid(
            ["metadata", "labels"],
            format!("missing {key}={value}; the webhook reads only ConfigMaps with that label"),
        ));
    }
    let document = configmap_document(cm).map_err(|e| errors.push(e)).ok();
    let errors = errors.into_iter().map(|e| e.at(format!("ConfigMap {id}")));
    Found {
        errors: errors.collect(),
        configmap: Some(id),
        document,
        item: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cm(labels: Value, data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "ha", "namespace": "khw", "labels": labels}, "data": data})
    }

    #[test]
    fn a_configmap_yields_its_document_and_what_is_wrong_around_it() {
        let found = unwrap(cm(
            json!({"knativeha.dev/policy": "true"}),
            json!({"policy.yaml": "kind: HighAvailabilityPolicy\n"}),
        ));
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].configmap.as_deref(), Some("khw/ha"));
        assert_eq!(
            found[0].document,
            Some(json!({"kind": "HighAvailabilityPolicy"}))
        );
        assert!(found[0].errors.is_empty());

        let found = unwrap(cm(json!({}), json!({})));
        let shown: Vec<String> = found[0].errors.iter().map(|e| e.to_string()).collect();
        assert_eq!(
            shown,
            [
                "ConfigMap khw/ha: metadata.labels: missing knativeha.dev/policy=true; the webhook reads only ConfigMaps with that label",
                "ConfigMap khw/ha: data.policy.yaml: missing (the policy document goes there)",
            ]
        );
        assert_eq!(found[0].document, None);

        // Read as /validate and the cluster source read it: a document that
        // is not a string is named so, not called missing.
        let found = unwrap(cm(
            json!({"knativeha.dev/policy": "true"}),
            json!({"policy.yaml": 3}),
        ));
        assert_eq!(
            found[0].errors[0].to_string(),
            "ConfigMap khw/ha: data.policy.yaml: must be a string, got 3"
        );
    }

    #[test]
    fn list_items_are_numbered_and_errors_are_placed() {
        let list = json!({"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "knativeha.dev/v1alpha1", "kind": "HighAvailabilityPolicy"},
            cm(json!({"knativeha.dev/policy": "true"}), json!({"policy.yaml": "a: 1"})),
        ]});
        let found = unwrap(list);
        assert_eq!(
            found.iter().map(|f| f.item).collect::<Vec<_>>(),
            [Some(1), Some(2)]
        );
        let e = found[1].in_configmap(PolicyError::invalid(["spec", "replicas"], "bad"));
        assert_eq!(
            e.clone().at("item 2").to_string(),
            "item 2: ConfigMap khw/ha: data.policy.yaml: spec.replicas: bad"
        );
        let read = crate::policy::DocumentRead {
            index: 3,
            item: found[1].item,
            configmap: found[1].configmap.clone(),
            outcome: Err(Vec::new()),
        };
        let doc = read.placed(e);
        assert_eq!(
            doc.to_string(),
            "document 3, item 2: ConfigMap khw/ha: data.policy.yaml: spec.replicas: bad"
        );
        assert!(is_empty_list(
            &json!({"apiVersion": "v1", "kind": "List", "items": []})
        ));
    }
}
