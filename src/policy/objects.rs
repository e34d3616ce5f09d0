//! Every error of a policy object as the API server holds it (a
//! HighAvailabilityPolicy resource, or a labelled policy ConfigMap): `check`
//! and the validating admission endpoint (`POST /validate`) report these.

use serde_json::Value;

use super::{Policy, PolicyError, prune};

/// The label that marks a policy ConfigMap (key, value).
pub const POLICY_LABEL: (&str, &str) = ("knativeha.dev/policy", "true");

/// The data key of a policy ConfigMap holding the policy document.
pub const DATA_KEY: &str = "policy.yaml";

/// Checks a HighAvailabilityPolicy object ([`prune::check_all`]). A CREATE
/// whose name the API server is still to generate (`metadata.generateName`,
/// no `metadata.name`) is checked as if named by `generateName`.
pub fn check_resource(object: &Value) -> Result<Policy, Vec<PolicyError>> {
    let meta = &object["metadata"];
    match meta["generateName"].as_str().filter(|g| !g.is_empty()) {
        Some(prefix) if meta["name"].as_str().is_none_or(str::is_empty) => {
            let mut named = object.clone();
            named["metadata"]["name"] = Value::from(prefix);
            prune::check_all(&named)
        }
        _ => prune::check_all(object),
    }
}

/// True when a ConfigMap carries [`POLICY_LABEL`].
pub fn is_policy_configmap(configmap: &Value) -> bool {
    configmap["metadata"]["labels"][POLICY_LABEL.0].as_str() == Some(POLICY_LABEL.1)
}

/// The policy document of a ConfigMap's `data` (the label is not looked
/// at), or why there is none (at `data.policy.yaml`).
pub fn configmap_document(configmap: &Value) -> Result<Value, PolicyError> {
    let message = match configmap["data"].get(DATA_KEY) {
        None => "missing (the policy document goes there)".to_string(),
        Some(Value::String(text)) => {
            let doc = crate::yaml::YamlDoc {
                index: 1,
                line: 1,
                text: text.clone(),
            };
            match crate::yaml::parse(&doc) {
                Ok(document) => return Ok(document),
                Err(e) => format!("invalid YAML: {e} (of the {DATA_KEY} value)"),
            }
        }
        Some(other) => format!("must be a string, got {}", crate::errors::show(other)),
    };
    Err(PolicyError::invalid(["data", DATA_KEY], message))
}

/// Checks the policy document of a ConfigMap ([`configmap_document`]):
/// every error, each a line starting `data.policy.yaml: `.
pub fn check_configmap_data(configmap: &Value) -> Result<Policy, Vec<String>> {
    let value = configmap_document(configmap).map_err(|e| vec![e.to_string()])?;
    prune::check_all(&value).map_err(|errors| {
        errors
            .iter()
            .flat_map(PolicyError::flatten)
            .map(|e| format!("data.{DATA_KEY}: {e}"))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hap(metadata: Value, spec: Value) -> Value {
        json!({
            "apiVersion": "knativeha.dev/v1alpha1", "kind": "HighAvailabilityPolicy",
            "metadata": metadata, "spec": spec,
            "status": {"conditions": "written by the webhook, not checked"},
        })
    }

    #[test]
    fn a_resource_gets_every_error_and_its_status_is_not_checked() {
        let errors = check_resource(&hap(
            json!({"name": "serving"}),
            json!({"targetNamespace": "knative-serving", "replicas": 0,
                   "leaderElection": {"renewDeadline": "11s", "retryPeriod": "10s"}}),
        ))
        .unwrap_err();
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert!(
            text.iter().any(|t| t.starts_with("spec.replicas:")),
            "{text:?}"
        );
        assert!(text.iter().any(|t| t.contains("renewDeadline")), "{text:?}");
    }

    #[test]
    fn a_name_still_to_be_generated_counts_as_a_name() {
        let spec = json!({"targetNamespace": "knative-serving"});
        let p = check_resource(&hap(json!({"generateName": "ha-"}), spec.clone())).unwrap();
        assert_eq!(p.name, "ha-");
        let errors = check_resource(&hap(json!({}), spec)).unwrap_err();
        assert!(
            errors[0].to_string().contains("metadata.name"),
            "{errors:?}"
        );
    }

    #[test]
    fn configmap_errors_name_the_data_key() {
        let cm = |data: Value| json!({"apiVersion": "v1", "kind": "ConfigMap", "data": data});
        let missing = check_configmap_data(&cm(json!({}))).unwrap_err();
        assert_eq!(
            missing,
            ["data.policy.yaml: missing (the policy document goes there)"]
        );
        let bad_yaml = check_configmap_data(&cm(json!({"policy.yaml": "spec: [x"}))).unwrap_err();
        assert!(
            bad_yaml[0].starts_with("data.policy.yaml: invalid YAML: "),
            "{bad_yaml:?}"
        );
        let doc = "apiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\n\
                   metadata: {name: a}\nspec: {targetNamespace: ns, replicas: 300}\n";
        let invalid = check_configmap_data(&cm(json!({"policy.yaml": doc}))).unwrap_err();
        assert_eq!(
            invalid,
            ["data.policy.yaml: spec.replicas: must be between 1 and 100, got 300"]
        );
    }

    #[test]
    fn only_the_label_value_true_marks_a_policy_configmap() {
        let labelled = |v: Value| json!({"metadata": {"labels": {"knativeha.dev/policy": v}}});
        assert!(is_policy_configmap(&labelled(json!("true"))));
        assert!(!is_policy_configmap(&labelled(json!("false"))));
        assert!(!is_policy_configmap(&json!({"metadata": {}})));
    }
}
