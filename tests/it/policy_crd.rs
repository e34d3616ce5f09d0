//! The generated CustomResourceDefinition: a structural schema carrying the
//! policy's bounds, status subresource, printer columns and short name; the
//! example policies satisfy its basic constraints (checked here by a small
//! independent validator) and out-of-bounds values do not.

use crate::support;

use serde_json::{Value, json};

fn crd() -> Value {
    serde_saphyr::from_str(&knative_ha_webhook::tools::preview::crd_yaml().unwrap()).unwrap()
}

fn schema() -> Value {
    crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
}

/// Structural schema rules (apiextensions.k8s.io/v1): every node has a type
/// (except int-or-string / preserve-unknown-fields nodes), no $ref, no
/// anyOf/oneOf/allOf/not, properties only on objects, items only on arrays.
fn structural_violations(node: &Value, path: &str, out: &mut Vec<String>) {
    let int_or_string = node["x-kubernetes-int-or-string"] == true;
    let preserve = node["x-kubernetes-preserve-unknown-fields"] == true;
    let ty = node["type"].as_str();
    if ty.is_none() && !int_or_string && !preserve {
        out.push(format!("{path}: no type"));
    }
    for forbidden in [
        "$ref",
        "anyOf",
        "oneOf",
        "allOf",
        "not",
        "definitions",
        "$schema",
    ] {
        if node.get(forbidden).is_some() {
            out.push(format!("{path}: {forbidden}"));
        }
    }
    if let Some(props) = node["properties"].as_object() {
        if ty != Some("object") {
            out.push(format!("{path}: properties on {ty:?}"));
        }
        for (k, v) in props {
            structural_violations(v, &format!("{path}.{k}"), out);
        }
    }
    if let Some(items) = node.get("items") {
        if ty != Some("array") {
            out.push(format!("{path}: items on {ty:?}"));
        }
        structural_violations(items, &format!("{path}[]"), out);
    }
    if let Some(add) = node.get("additionalProperties").filter(|a| a.is_object()) {
        structural_violations(add, &format!("{path}{{}}"), out);
    }
}

/// Basic constraints: type, required, enum, bounds, lengths, unknown fields.
fn violations(schema: &Value, value: &Value, path: &str, out: &mut Vec<String>) {
    if value.is_null() {
        if schema["nullable"] != true {
            out.push(format!("{path}: null"));
        }
        return;
    }
    if schema["x-kubernetes-int-or-string"] == true {
        if let Some(n) = value.as_i64() {
            if let Some(min) = schema["minimum"].as_f64()
                && (n as f64) < min
            {
                out.push(format!("{path}: {n} < {min}"));
            }
        } else if !value.is_string() {
            out.push(format!("{path}: not int-or-string"));
        }
        return;
    }
    let ok = match schema["type"].as_str() {
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("string") => value.is_string(),
        Some("integer") => value.is_i64(),
        Some("boolean") => value.is_boolean(),
        _ => true,
    };
    if !ok {
        out.push(format!("{path}: wrong type"));
        return;
    }
    if let Some(n) = value.as_f64() {
        if schema["minimum"].as_f64().is_some_and(|m| n < m) {
            out.push(format!("{path}: below minimum"));
        }
        if schema["maximum"].as_f64().is_some_and(|m| n > m) {
            out.push(format!("{path}: above maximum"));
        }
    }
    if let Some(s) = value.as_str() {
        let len = s.chars().count() as u64;
        if schema["minLength"].as_u64().is_some_and(|m| len < m)
            || schema["maxLength"].as_u64().is_some_and(|m| len > m)
        {
            out.push(format!("{path}: length"));
        }
        if let Some(e) = schema["enum"].as_array()
            && !e.contains(value)
        {
            out.push(format!("{path}: not in enum"));
        }
    }
    if let Some(obj) = value.as_object() {
        let props = schema["properties"].as_object();
        for (k, v) in obj {
            // apiVersion, kind and metadata are implicit at the root of a CRD schema
            if path.is_empty() && ["apiVersion", "kind", "metadata"].contains(&k.as_str()) {
                continue;
            }
            match props.and_then(|p| p.get(k)) {
                Some(sub) => violations(sub, v, &format!("{path}.{k}"), out),
                None if props.is_some() => out.push(format!("{path}.{k}: unknown")),
                None => {}
            }
        }
        for r in schema["required"].as_array().into_iter().flatten() {
            if !obj.contains_key(r.as_str().unwrap()) {
                out.push(format!("{path}.{}: required", r.as_str().unwrap()));
            }
        }
    }
    if let (Some(items), Some(arr)) = (schema.get("items"), value.as_array()) {
        for (i, v) in arr.iter().enumerate() {
            violations(items, v, &format!("{path}[{i}]"), out);
        }
    }
}

fn policy_doc(rel: &str) -> Value {
    serde_saphyr::from_str(&std::fs::read_to_string(support::repo_path(rel)).unwrap()).unwrap()
}

#[test]
fn crd_is_cluster_scoped_with_status_printer_columns_and_short_name() {
    let crd = crd();
    assert_eq!(crd["apiVersion"], "apiextensions.k8s.io/v1");
    assert_eq!(
        crd["metadata"]["name"],
        "highavailabilitypolicies.knativeha.dev"
    );
    assert_eq!(crd["spec"]["scope"], "Cluster");
    assert_eq!(crd["spec"]["names"]["shortNames"], json!(["hap"]));
    let v = &crd["spec"]["versions"][0];
    assert_eq!(v["name"], "v1alpha1");
    assert_eq!(v["served"], true);
    assert_eq!(v["storage"], true);
    assert_eq!(v["subresources"]["status"], json!({}));
    let columns: Vec<&str> = v["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(columns, ["Target namespace", "Ready", "Age"]);
}

#[test]
fn schema_is_structural() {
    let mut out = Vec::new();
    structural_violations(&schema(), "openAPIV3Schema", &mut out);
    assert!(out.is_empty(), "{out:#?}");
    // metadata at the root may only be `type: object` (the API server owns it)
    let metadata = &schema()["properties"]["metadata"];
    assert!(
        metadata.is_null() || *metadata == json!({"type": "object"}),
        "{metadata}"
    );
}

#[test]
fn schema_carries_the_bounds() {
    let s = schema();
    let spec = &s["properties"]["spec"]["properties"];
    assert_eq!(spec["replicas"]["minimum"], 1);
    assert_eq!(spec["replicas"]["maximum"], 100);
    assert_eq!(
        spec["workloads"]["items"]["properties"]["replicas"]["maximum"],
        100
    );
    assert_eq!(
        spec["leaderElection"]["properties"]["buckets"]["minimum"],
        1
    );
    assert_eq!(
        spec["leaderElection"]["properties"]["buckets"]["maximum"],
        10
    );
    for d in ["leaseDuration", "renewDeadline", "retryPeriod"] {
        assert!(
            spec["leaderElection"]["properties"][d]["pattern"].is_string(),
            "{d}"
        );
    }
    assert_eq!(
        spec["podAntiAffinity"]["properties"]["type"]["enum"],
        json!(["Preferred", "Required", "None"])
    );
    assert_eq!(spec["targetNamespace"]["maxLength"], 63);
    assert!(spec["targetNamespace"]["pattern"].is_string());
    for f in ["minAvailable", "maxUnavailable"] {
        let node = &spec["podDisruptionBudget"]["properties"][f];
        assert_eq!(node["x-kubernetes-int-or-string"], true, "{f}");
        assert!(node["pattern"].as_str().unwrap().contains('%'), "{f}");
    }
    assert_eq!(s["required"], json!(["spec"]));
}

#[test]
fn example_policies_satisfy_the_schema_and_bad_values_do_not() {
    let s = schema();
    for rel in [
        "examples/policy.yaml",
        "examples/policies/ha-disabled.yaml",
        "examples/policies/kourier-system.yaml",
    ] {
        let mut out = Vec::new();
        violations(&s, &policy_doc(rel), "", &mut out);
        assert!(out.is_empty(), "{rel}: {out:?}");
    }
    type Edit = fn(&mut Value);
    let bad: [(&str, Edit); 6] = [
        ("replicas 0", |v| v["spec"]["replicas"] = json!(0)),
        ("replicas 101", |v| {
            v["spec"]["workloads"][0]["replicas"] = json!(101)
        }),
        ("buckets 11", |v| {
            v["spec"]["leaderElection"]["buckets"] = json!(11)
        }),
        ("type Sometimes", |v| {
            v["spec"]["podAntiAffinity"]["type"] = json!("Sometimes")
        }),
        ("typo", |v| v["spec"]["replcas"] = json!(1)),
        ("negative PDB", |v| {
            v["spec"]["podDisruptionBudget"]["maxUnavailable"] = json!(-1)
        }),
    ];
    for (name, edit) in bad {
        let mut doc = policy_doc("examples/policy.yaml");
        edit(&mut doc);
        let mut out = Vec::new();
        violations(&s, &doc, "", &mut out);
        assert!(!out.is_empty(), "{name} passed the schema");
    }
}

/// The rules the schema can express are enforced by the API server itself
/// (CEL `x-kubernetes-validations`, O(1) each: no list walks, so the
/// CRD's cost estimate stays within the API server's budget); the rest
/// by `POST /validate`.
#[test]
fn schema_carries_the_cel_rules() {
    let spec = &schema()["properties"]["spec"];
    let rules = |node: &Value| -> Vec<String> {
        node["x-kubernetes-validations"]
            .as_array()
            .map(|r| {
                r.iter()
                    .map(|v| v["rule"].as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_default()
    };
    for pdb in [
        &spec["properties"]["podDisruptionBudget"],
        &spec["properties"]["workloads"]["items"]["properties"]["podDisruptionBudget"],
    ] {
        assert_eq!(
            rules(pdb),
            ["has(self.minAvailable) != has(self.maxUnavailable)"],
            "{pdb}"
        );
    }
    let spec_rules = rules(spec);
    assert_eq!(spec_rules.len(), 1, "{spec_rules:?}");
    assert!(
        spec_rules[0].contains("self.replicas == 1"),
        "{spec_rules:?}"
    );
    for spread in [
        &spec["properties"]["topologySpreadConstraints"],
        &spec["properties"]["workloads"]["items"]["properties"]["topologySpreadConstraints"],
    ] {
        assert_eq!(spread["minItems"], 1, "{spread}");
    }
}

/// `status.lastValidSpec` (the record a restarted webhook reads back) has
/// the spec's own schema: a structural schema would prune anything else.
#[test]
fn status_schema_holds_the_last_valid_spec() {
    let status = &schema()["properties"]["status"]["properties"];
    let mut recorded = status["lastValidSpec"].clone();
    let mut spec = schema()["properties"]["spec"].clone();
    for node in [&mut recorded, &mut spec] {
        let obj = node.as_object_mut().unwrap();
        obj.remove("description");
        obj.remove("nullable");
    }
    assert_eq!(recorded, spec);
    assert_eq!(status["lastValidGeneration"]["type"], "integer");
}
