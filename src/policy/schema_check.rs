//! Structural check of a policy document against the CRD's own
//! `openAPIV3Schema`: unknown fields, types, required fields and enums, with
//! the field path and bad value in every error. This is what the API server
//! would reject (and what a file or ConfigMap policy must not get past).
//! Value rules (bounds, durations, ...) are in [`super::validate`].

use serde_json::Value;

use super::{API_VERSION, KIND, PolicyError, crd_schema};

pub use crate::errors::show;

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Checks a whole document (top level: apiVersion, kind, metadata, spec,
/// status). Returns every structural error found.
pub fn check_document(doc: &Value) -> Vec<PolicyError> {
    let mut errors = Vec::new();
    let Some(obj) = doc.as_object() else {
        errors.push(PolicyError::invalid(
            "(document)",
            format!(
                "must be a mapping (a HighAvailabilityPolicy), got {} {}",
                type_name(doc),
                show(doc)
            ),
        ));
        return errors;
    };
    check_type_meta(obj, &mut errors);
    let schema = crd_schema();
    let props = schema.get("properties").and_then(Value::as_object);
    for (key, value) in obj {
        match key.as_str() {
            "apiVersion" | "kind" => {}
            // Server-populated metadata (managedFields, uid, ...) and status
            // are the API server's business, not the policy's.
            "metadata" => check_metadata(value, &mut errors),
            "status" => {}
            _ => match props.and_then(|p| p.get(key)) {
                Some(sub) => check_value(sub, value, key, &mut errors),
                None => errors.push(PolicyError::invalid(
                    key.as_str(),
                    format!(
                        "unknown field {key:?} (known fields: apiVersion, kind, metadata, spec, status)"
                    ),
                )),
            },
        }
    }
    check_name_present(obj, &mut errors);
    if !obj.contains_key("spec") {
        errors.push(PolicyError::invalid("spec", "required field missing"));
    }
    errors
}

/// `apiVersion` and `kind` must name this resource.
fn check_type_meta(obj: &serde_json::Map<String, Value>, errors: &mut Vec<PolicyError>) {
    match obj.get("apiVersion") {
        Some(Value::String(v)) if v == API_VERSION => {}
        other => errors.push(PolicyError::invalid(
            "apiVersion",
            format!(
                "must be {API_VERSION:?}, got {}",
                other.map_or("nothing".into(), show)
            ),
        )),
    }
    match obj.get("kind") {
        Some(Value::String(v)) if v == KIND => {}
        other => errors.push(PolicyError::invalid(
            "kind",
            format!(
                "must be {KIND:?}, got {}",
                other.map_or("nothing".into(), show)
            ),
        )),
    }
}

/// The few metadata fields a policy relies on must be strings.
fn check_metadata(value: &Value, errors: &mut Vec<PolicyError>) {
    for field in ["name", "namespace", "generateName"] {
        if let Some(v) = value.get(field).filter(|v| !v.is_string() && !v.is_null()) {
            errors.push(PolicyError::invalid(
                format!("metadata.{field}"),
                format!("must be a string, got {} {}", type_name(v), show(v)),
            ));
        }
    }
    if !value.is_object() {
        errors.push(PolicyError::invalid(
            "metadata",
            format!(
                "must be a mapping, got {} {}",
                type_name(value),
                show(value)
            ),
        ));
    }
}

/// `metadata.name` is required (a wrongly typed one is reported by
/// [`check_metadata`]).
fn check_name_present(obj: &serde_json::Map<String, Value>, errors: &mut Vec<PolicyError>) {
    match obj.get("metadata").and_then(|m| m.get("name")) {
        Some(Value::String(name)) if !name.is_empty() => {}
        Some(Value::String(_)) => {
            errors.push(PolicyError::invalid("metadata.name", "must not be empty"))
        }
        // a non-string name is reported by check_metadata
        Some(v) if !v.is_null() => {}
        _ if obj.get("metadata").is_some_and(|m| !m.is_object()) => {}
        _ => errors.push(PolicyError::invalid(
            "metadata.name",
            "required field missing (the policy's name appears in every change it makes)",
        )),
    }
}

fn unknown_field(
    path: &str,
    key: &str,
    props: Option<&serde_json::Map<String, Value>>,
) -> PolicyError {
    let known: Vec<&str> = props
        .map(|p| p.keys().map(String::as_str).collect())
        .unwrap_or_default();
    PolicyError::invalid(
        path,
        format!("unknown field {key:?} (known fields: {})", known.join(", ")),
    )
}

/// Checks `value` at `path` against the schema node `schema`.
pub fn check_value(schema: &Value, value: &Value, path: &str, errors: &mut Vec<PolicyError>) {
    if value.is_null() {
        if schema.get("nullable").and_then(Value::as_bool) == Some(true) {
            return;
        }
        errors.push(PolicyError::invalid(path, "must not be null"));
        return;
    }
    if schema
        .get("x-kubernetes-int-or-string")
        .and_then(Value::as_bool)
        == Some(true)
    {
        check_int_or_string(value, path, errors);
        return;
    }
    let Some(ty) = schema.get("type").and_then(Value::as_str) else {
        return;
    };
    if !check_type(ty, value, path, errors) {
        return;
    }
    match value {
        Value::Object(obj) => check_object(schema, obj, path, errors),
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check_value(item_schema, item, &format!("{path}[{i}]"), errors);
                }
            }
        }
        Value::String(s) => check_enum(schema, s, value, path, errors),
        Value::Number(n)
            if ty == "integer" && schema.get("format").and_then(Value::as_str) == Some("int32") =>
        {
            let fits = n.as_i64().is_some_and(|i| i32::try_from(i).is_ok());
            if !fits {
                errors.push(PolicyError::invalid(
                    path,
                    format!("must be a 32-bit integer, got {n}"),
                ));
            }
        }
        _ => {}
    }
}

/// `x-kubernetes-int-or-string`: a 32-bit integer or any string.
fn check_int_or_string(value: &Value, path: &str, errors: &mut Vec<PolicyError>) {
    let fits = match value {
        Value::String(_) => true,
        Value::Number(n) => n.as_i64().is_some_and(|i| i32::try_from(i).is_ok()),
        _ => false,
    };
    if !fits {
        errors.push(PolicyError::invalid(
            path,
            format!(
                "must be a 32-bit integer or a string, got {} {}",
                type_name(value),
                show(value)
            ),
        ));
    }
}

/// The schema's `type`; false (with the error recorded) when it differs.
fn check_type(ty: &str, value: &Value, path: &str, errors: &mut Vec<PolicyError>) -> bool {
    let actual = type_name(value);
    let ok = match ty {
        "number" => value.is_number(),
        other => other == actual,
    };
    if !ok {
        errors.push(PolicyError::invalid(
            path,
            format!(
                "must be {} {ty}, got {actual} {}",
                if ty == "integer" || ty == "array" || ty == "object" {
                    "an"
                } else {
                    "a"
                },
                show(value)
            ),
        ));
    }
    ok
}

/// Fields of a mapping: known, additional or unknown; then required ones.
fn check_object(
    schema: &Value,
    obj: &serde_json::Map<String, Value>,
    path: &str,
    errors: &mut Vec<PolicyError>,
) {
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties");
    let preserve = schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true);
    for (key, sub_value) in obj {
        let sub_path = format!("{path}.{key}");
        if let Some(sub) = props.and_then(|p| p.get(key)) {
            check_value(sub, sub_value, &sub_path, errors);
        } else if let Some(add) = additional.filter(|a| a.is_object()) {
            check_value(add, sub_value, &sub_path, errors);
        } else if props.is_some() && !preserve {
            errors.push(unknown_field(&sub_path, key, props));
        }
    }
    if let Some(required) = schema.get("required").and_then(Value::as_array) {
        for key in required.iter().filter_map(Value::as_str) {
            if !obj.contains_key(key) {
                errors.push(PolicyError::invalid(
                    format!("{path}.{key}"),
                    "required field missing",
                ));
            }
        }
    }
}

/// A string the schema restricts to an `enum`.
fn check_enum(schema: &Value, s: &str, value: &Value, path: &str, errors: &mut Vec<PolicyError>) {
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.iter().any(|a| a.as_str() == Some(s))
    {
        let names: Vec<String> = allowed.iter().map(show).collect();
        errors.push(PolicyError::invalid(
            path,
            format!("must be one of {}, got {}", names.join(", "), show(value)),
        ));
    }
}
