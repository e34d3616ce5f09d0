//! Every error of a policy document in one pass, for `check`: the
//! structural errors ([`super::schema_check`]) are reported, then the fields
//! they name (unknown fields, wrong types) are pruned and the value rules
//! ([`super::validate`]) run over what is left, so a typo in one field does
//! not hide an out-of-range value in another.

use serde_json::Value;

use super::{HighAvailabilityPolicy, Policy, PolicyError, crd_schema, schema_check};

/// Top-level fields of a policy document.
const TOP_LEVEL: [&str; 5] = ["apiVersion", "kind", "metadata", "spec", "status"];

/// True when `value` has the JSON type the schema node asks for.
fn type_fits(schema: &Value, value: &Value) -> bool {
    if schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true)
    {
        return value.is_string() || value.as_i64().is_some_and(|i| i32::try_from(i).is_ok());
    }
    match schema.get("type").and_then(Value::as_str) {
        None => true,
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("string") => value.is_string(),
        Some("boolean") => value.is_boolean(),
        Some("integer") => value.is_i64() || value.is_u64(),
        Some("number") => value.is_number(),
        Some(_) => true,
    }
}

/// Removes, below `schema`, the fields the schema does not know and the
/// values of the wrong type (nulls included).
pub fn prune(schema: &Value, value: &mut Value) {
    match value {
        Value::Object(obj) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            let preserve = schema
                .get("x-kubernetes-preserve-unknown-fields")
                .and_then(Value::as_bool)
                == Some(true);
            obj.retain(|key, sub| {
                let sub_schema = props.and_then(|p| p.get(key)).or(additional);
                match sub_schema {
                    Some(s) => !sub.is_null() && type_fits(s, sub),
                    None => props.is_none() || preserve,
                }
            });
            for (key, sub) in obj.iter_mut() {
                if let Some(s) = props.and_then(|p| p.get(key)).or(additional) {
                    prune(s, sub);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                items.retain(|item| !item.is_null() && type_fits(item_schema, item));
                for item in items.iter_mut() {
                    prune(item_schema, item);
                }
            }
        }
        _ => {}
    }
}

/// Checks one policy document and returns every error: structural ones
/// first, then the value rules over the pruned document (skipping paths that
/// already have an error). `Ok` only when there is none.
pub fn check_all(document: &Value) -> Result<Policy, Vec<PolicyError>> {
    let mut errors = schema_check::check_document(document);
    let mut pruned = document.clone();
    if let Value::Object(obj) = &mut pruned {
        obj.retain(|k, _| TOP_LEVEL.contains(&k.as_str()));
        obj.remove("status");
        if let Some(spec) = obj.get_mut("spec") {
            let schema = crd_schema()
                .pointer("/properties/spec")
                .unwrap_or(&Value::Null);
            if type_fits(schema, spec) {
                prune(schema, spec);
            }
        }
    }
    let parsed = serde_json::from_value::<HighAvailabilityPolicy>(pruned);
    let semantic = match parsed {
        Ok(res) => match Policy::from_resource(&res) {
            Ok(policy) if errors.is_empty() => return Ok(policy),
            Ok(_) => Vec::new(),
            Err(e) => e.flatten(),
        },
        // Whatever stops decoding (a required field missing or of the
        // wrong type) is a structural error already reported.
        Err(e) if errors.is_empty() => vec![PolicyError::Parse(e.to_string())],
        Err(_) => Vec::new(),
    };
    let reported: Vec<String> = errors.iter().filter_map(path_of).collect();
    for e in semantic {
        let dup = path_of(&e).is_some_and(|p| {
            reported.iter().any(|r| {
                *r == p || p.starts_with(&format!("{r}.")) || p.starts_with(&format!("{r}["))
            })
        });
        if !dup {
            errors.push(e);
        }
    }
    Err(errors)
}

fn path_of(e: &PolicyError) -> Option<String> {
    match e {
        PolicyError::Invalid { path, .. } => Some(path.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn doc(spec: Value) -> Value {
        json!({
            "apiVersion": "knativeha.dev/v1alpha1",
            "kind": "HighAvailabilityPolicy",
            "metadata": {"name": "serving"},
            "spec": spec,
        })
    }

    #[test]
    fn a_typo_does_not_hide_a_bad_value() {
        let errors = check_all(&doc(json!({
            "targetNamespace": "knative-serving",
            "replicas": 300,
            "workloads": [{"name": "controller", "replcas": 2}],
        })))
        .unwrap_err();
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert!(
            text.iter()
                .any(|t| t.starts_with("spec.workloads[0].replcas: unknown field")),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|t| t == "spec.replicas: must be between 1 and 100, got 300"),
            "{text:?}"
        );
        assert_eq!(text.len(), 2, "{text:?}");
    }

    #[test]
    fn a_wrong_type_is_reported_once_and_other_values_still_checked() {
        let errors = check_all(&doc(json!({
            "targetNamespace": "knative-serving",
            "replicas": "three",
            "leaderElection": {"buckets": 12},
        })))
        .unwrap_err();
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert!(
            text.iter()
                .any(|t| t.starts_with("spec.replicas: must be an integer")),
            "{text:?}"
        );
        assert!(
            text.iter()
                .any(|t| t.contains("spec.leaderElection.buckets")),
            "{text:?}"
        );
        assert_eq!(text.len(), 2, "{text:?}");
    }

    #[test]
    fn a_valid_document_passes() {
        let p = check_all(&doc(
            json!({"targetNamespace": "knative-serving", "replicas": 3}),
        ))
        .unwrap();
        assert_eq!(p.spec.replicas, Some(3));
    }
}
