//! Structural check of a policy document against the CRD's own
//! `openAPIV3Schema`: unknown fields, types, required fields and enums, with
//! the field path and bad value in every error. This is what the API server
//! would reject (and what a file or ConfigMap policy must not get past).
//! The check takes out what it refuses, so that the value rules
//! ([`super::validate`]) can still run over the rest ([`super::prune`]).

use serde_json::{Map, Value};

use super::{API_VERSION, KIND, Path, PolicyError, crd_schema};

pub use crate::errors::show;

/// Top-level fields of a policy document.
const TOP_LEVEL: [&str; 5] = ["apiVersion", "kind", "metadata", "spec", "status"];

/// What an error says it got: the value's JSON type, then the value.
fn got(value: &Value) -> String {
    format!("{} {}", type_name(value), show(value))
}

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

/// True when the schema node sets `flag` (`nullable`, ...) to true.
fn flag(schema: &Value, flag: &str) -> bool {
    schema.get(flag).and_then(Value::as_bool) == Some(true)
}

/// The schema of field `key` of a mapping under `schema`: `Ok(None)` when
/// the mapping lets any field through unchecked, `Err` (its known fields)
/// when it has no such field.
fn field<'a>(schema: &'a Value, key: &str) -> Result<Option<&'a Value>, &'a Map<String, Value>> {
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    match (props.and_then(|p| p.get(key)).or(additional), props) {
        (None, Some(props)) if !flag(schema, "x-kubernetes-preserve-unknown-fields") => Err(props),
        (sub, _) => Ok(sub),
    }
}

/// True when `value` has the JSON type the schema node asks for (any type
/// when it names none; a 32-bit integer or any string for
/// `x-kubernetes-int-or-string`).
fn fits(schema: &Value, value: &Value) -> bool {
    if flag(schema, "x-kubernetes-int-or-string") {
        return value.is_string() || value.as_i64().is_some_and(|i| i32::try_from(i).is_ok());
    }
    match schema.get("type").and_then(Value::as_str) {
        None => true,
        Some("number") => value.is_number(),
        Some(ty) => ty == type_name(value),
    }
}

/// Checks a whole document (top level: apiVersion, kind, metadata, spec,
/// status). Returns every structural error found, and takes out of the
/// document the fields and items they name (unknown, of the wrong type,
/// null).
pub fn check_document(doc: &mut Value) -> Vec<PolicyError> {
    let Some(obj) = doc.as_object_mut() else {
        let message = format!(
            "must be a mapping (a HighAvailabilityPolicy), got {}",
            got(doc)
        );
        return vec![PolicyError::invalid(["(document)"], message)];
    };
    let mut errors = Vec::new();
    for (field, wanted) in [("apiVersion", API_VERSION), ("kind", KIND)] {
        match obj.get(field) {
            Some(Value::String(v)) if v == wanted => {}
            other => {
                let got = other.map_or("nothing".into(), show);
                errors.push(PolicyError::invalid(
                    [field],
                    format!("must be {wanted:?}, got {got}"),
                ));
            }
        }
    }
    let props = crd_schema().get("properties").and_then(Value::as_object);
    for (key, value) in obj.iter_mut() {
        match key.as_str() {
            // Server-populated metadata (managedFields, uid, ...) and status
            // are the API server's business, not the policy's.
            "apiVersion" | "kind" | "status" => {}
            "metadata" => check_metadata(value, &mut errors),
            _ => match props.and_then(|p| p.get(key)) {
                Some(sub) => check_value(sub, value, &Path::from([key.as_str()]), &mut errors),
                None => errors.push(unknown_field(&Path::default(), key, TOP_LEVEL.to_vec())),
            },
        }
    }
    check_name_present(obj, &mut errors);
    if !obj.contains_key("spec") {
        errors.push(PolicyError::invalid(["spec"], "required field missing"));
    }
    obj.retain(|key, _| TOP_LEVEL.contains(&key.as_str()));
    errors
}

/// The few metadata fields a policy relies on must be strings.
fn check_metadata(value: &Value, errors: &mut Vec<PolicyError>) {
    for field in ["name", "namespace", "generateName"] {
        if let Some(v) = value.get(field).filter(|v| !v.is_string() && !v.is_null()) {
            errors.push(PolicyError::invalid(
                ["metadata", field],
                format!("must be a string, got {}", got(v)),
            ));
        }
    }
    if !value.is_object() {
        errors.push(PolicyError::invalid(
            ["metadata"],
            format!("must be a mapping, got {}", got(value)),
        ));
    }
}

/// `metadata.name` is required (a wrongly typed one is reported by
/// [`check_metadata`]).
fn check_name_present(obj: &Map<String, Value>, errors: &mut Vec<PolicyError>) {
    let path = ["metadata", "name"];
    match obj.get("metadata").and_then(|m| m.get("name")) {
        Some(Value::String(name)) if !name.is_empty() => {}
        Some(Value::String(_)) => errors.push(PolicyError::invalid(path, "must not be empty")),
        Some(v) if !v.is_null() => {}
        _ if obj.get("metadata").is_some_and(|m| !m.is_object()) => {}
        _ => errors.push(PolicyError::invalid(
            path,
            "required field missing (the policy's name appears in every change it makes)",
        )),
    }
}

fn unknown_field(path: &Path, key: &str, known: Vec<&str>) -> PolicyError {
    let message = format!("unknown field {key:?} (known fields: {})", known.join(", "));
    PolicyError::invalid(path.key(key), message)
}

/// Checks `value` at `path` against the schema node `schema`, taking out
/// below it the fields and items it refuses.
pub fn check_value(schema: &Value, value: &mut Value, path: &Path, errors: &mut Vec<PolicyError>) {
    if value.is_null() {
        if !flag(schema, "nullable") {
            errors.push(PolicyError::invalid(path.clone(), "must not be null"));
        }
        return;
    }
    let int_or_string = flag(schema, "x-kubernetes-int-or-string");
    let ty = schema["type"].as_str().unwrap_or_default();
    if !fits(schema, value) {
        let wanted = match ty {
            _ if int_or_string => "a 32-bit integer or a string".to_string(),
            "integer" | "array" | "object" => format!("an {ty}"),
            _ => format!("a {ty}"),
        };
        errors.push(PolicyError::invalid(
            path.clone(),
            format!("must be {wanted}, got {}", got(value)),
        ));
        return;
    }
    if int_or_string || ty.is_empty() {
        return;
    }
    match value {
        Value::Object(obj) => check_object(schema, obj, path, errors),
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    check_value(item_schema, item, &path.index(i), errors);
                }
                items.retain(|item| !item.is_null() && fits(item_schema, item));
            }
        }
        scalar => check_scalar(schema, ty, scalar, path, errors),
    }
}

/// Fields of a mapping: known, additional or unknown; then required ones.
fn check_object(
    schema: &Value,
    obj: &mut Map<String, Value>,
    path: &Path,
    errors: &mut Vec<PolicyError>,
) {
    for (key, sub_value) in obj.iter_mut() {
        match field(schema, key) {
            Ok(Some(sub)) => check_value(sub, sub_value, &path.key(key), errors),
            Ok(None) => {}
            Err(props) => errors.push(unknown_field(
                path,
                key,
                props.keys().map(String::as_str).collect(),
            )),
        }
    }
    let required = schema.get("required").and_then(Value::as_array);
    for key in required.into_iter().flatten().filter_map(Value::as_str) {
        if !obj.contains_key(key) {
            errors.push(PolicyError::invalid(
                path.key(key),
                "required field missing",
            ));
        }
    }
    obj.retain(|key, sub| match field(schema, key) {
        Ok(Some(s)) => !sub.is_null() && fits(s, sub),
        Ok(None) => true,
        Err(_) => false,
    });
}

/// A string the schema restricts to an `enum`, an integer to `int32`.
fn check_scalar(
    schema: &Value,
    ty: &str,
    value: &Value,
    path: &Path,
    errors: &mut Vec<PolicyError>,
) {
    let allowed = schema.get("enum").and_then(Value::as_array);
    if let (Some(s), Some(allowed)) = (value.as_str(), allowed)
        && !allowed.iter().any(|a| a.as_str() == Some(s))
    {
        let names: Vec<String> = allowed.iter().map(show).collect();
        errors.push(PolicyError::invalid(
            path.clone(),
            format!("must be one of {}, got {}", names.join(", "), show(value)),
        ));
    }
    if ty == "integer"
        && schema["format"] == "int32"
        && value.as_i64().is_none_or(|i| i32::try_from(i).is_err())
    {
        errors.push(PolicyError::invalid(
            path.clone(),
            format!("must be a 32-bit integer, got {value}"),
        ));
    }
}
