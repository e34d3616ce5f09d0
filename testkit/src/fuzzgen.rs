//! Input generators shared by the fuzz targets (`fuzz/`, driven by
//! libFuzzer) and the robustness tests (`tests/it/robustness_*.rs`, driven by
//! proptest through random bytes): arbitrary JSON, and real objects or
//! AdmissionReviews with a few fields mutated. Both drive the same
//! `arbitrary::Unstructured`, so a byte string found by one reproduces in
//! the other.
#![allow(dead_code)]

use arbitrary::{Result, Unstructured};
use serde_json::{Map, Number, Value};

/// Strings that mean something to the webhook: operations, kinds, the
/// Knative names the policy singles out, namespaces, JSON-pointer escapes.
pub const STRINGS: &[&str] = &[
    "",
    "CREATE",
    "UPDATE",
    "DELETE",
    "CONNECT",
    "knative-serving",
    "default",
    "kube-system",
    "activator",
    "autoscaler",
    "autoscaler-hpa",
    "controller",
    "webhook",
    "net-kourier-controller",
    "config-leader-election",
    "activator-pdb",
    "Deployment",
    "ConfigMap",
    "HorizontalPodAutoscaler",
    "PodDisruptionBudget",
    "apps",
    "autoscaling",
    "policy",
    "v1",
    "v2",
    "admission.k8s.io/v1",
    "admission.k8s.io/v1beta1",
    "AdmissionReview",
    "replicas",
    "spec",
    "metadata",
    "template",
    "containers",
    "affinity",
    "minReplicas",
    "maxReplicas",
    "minAvailable",
    "maxUnavailable",
    "80%",
    "100%",
    "-1",
    "lease-duration",
    "buckets",
    "60s",
    // What the engine reads over an object's life: the legacy keys, the
    // opt-out label, the engine's records, durations at the edge of int64
    // nanoseconds.
    "leaseDuration",
    "renewDeadline",
    "retryPeriod",
    "knativeha.dev/skip",
    "true",
    "knativeha.dev/written-min-replicas",
    "knativeha.dev/original-budget",
    "9223372036854775807ns",
    "94522879700260684295381835.9h",
    "a/b",
    "~0~1",
    "\u{0}",
    "é\u{202e}",
];

/// Numbers at the edges of what the engine may compare or add.
pub fn edge_number(u: &mut Unstructured<'_>) -> Result<Number> {
    Ok(match u.int_in_range(0..=11u8)? {
        0 => Number::from(0),
        1 => Number::from(-1),
        2 => Number::from(1),
        3 => Number::from(i32::MAX),
        4 => Number::from(i32::MIN),
        5 => Number::from(i64::MAX),
        6 => Number::from(u64::MAX),
        7 => Number::from_f64(1.5).expect("finite"),
        8 => Number::from_f64(1e308).expect("finite"),
        // Where `n - min`, `replicas * 25` overflow if unchecked.
        9 => Number::from(i64::MIN),
        10 => Number::from(i64::MAX / 25 + 1),
        _ => Number::from(u.int_in_range(0..=200i64)?),
    })
}

pub fn string(u: &mut Unstructured<'_>) -> Result<String> {
    if u.ratio(2, 3)? {
        Ok(u.choose(STRINGS)?.to_string())
    } else {
        Ok(u.arbitrary::<String>()?)
    }
}

/// Any JSON value, at most `depth` levels deep.
pub fn json(u: &mut Unstructured<'_>, depth: u32) -> Result<Value> {
    let top = if depth == 0 { 3 } else { 5 };
    Ok(match u.int_in_range(0..=top)? {
        0 => Value::Null,
        1 => Value::Bool(u.arbitrary()?),
        2 => Value::Number(edge_number(u)?),
        3 => Value::String(string(u)?),
        4 => {
            let n = u.int_in_range(0..=4usize)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(json(u, depth - 1)?);
            }
            Value::Array(items)
        }
        _ => {
            let n = u.int_in_range(0..=5usize)?;
            let mut map = Map::new();
            for _ in 0..n {
                map.insert(string(u)?, json(u, depth - 1)?);
            }
            Value::Object(map)
        }
    })
}

/// JSON that is shaped like an AdmissionReview more often than chance
/// would make it: the top level and `request` are objects with the
/// expected keys, holding arbitrary values.
pub fn review_like(u: &mut Unstructured<'_>) -> Result<Value> {
    let mut request = Map::new();
    for key in [
        "uid",
        "kind",
        "resource",
        "namespace",
        "name",
        "operation",
        "object",
        "oldObject",
        "dryRun",
    ] {
        if u.ratio(3, 4)? {
            request.insert(key.to_string(), json(u, 3)?);
        }
    }
    let mut review = Map::new();
    for (key, value) in [
        ("apiVersion", Value::String(string(u)?)),
        ("kind", Value::String(string(u)?)),
        ("request", Value::Object(request)),
    ] {
        if u.ratio(4, 5)? {
            review.insert(key.to_string(), value);
        }
    }
    Ok(Value::Object(review))
}

/// Every JSON pointer into `v` (`""` is the root).
pub fn pointers(v: &Value) -> Vec<String> {
    fn walk(v: &Value, at: &mut String, out: &mut Vec<String>) {
        out.push(at.clone());
        let len = at.len();
        match v {
            Value::Object(map) => {
                for (k, child) in map {
                    at.push('/');
                    at.push_str(&k.replace('~', "~0").replace('/', "~1"));
                    walk(child, at, out);
                    at.truncate(len);
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    at.push('/');
                    at.push_str(&i.to_string());
                    walk(child, at, out);
                    at.truncate(len);
                }
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(v, &mut String::new(), &mut out);
    out
}

/// `base` with one to four fields replaced, removed, retyped or added.
/// Paths under `prefix` (a JSON pointer, e.g. `/request/object`) only.
pub fn mutate(u: &mut Unstructured<'_>, base: &Value, prefix: &str) -> Result<Value> {
    let mut v = base.clone();
    let rounds = u.int_in_range(1..=4u8)?;
    for _ in 0..rounds {
        let candidates: Vec<String> = pointers(&v)
            .into_iter()
            .filter(|p| p.starts_with(prefix))
            .collect();
        if candidates.is_empty() {
            break;
        }
        let at = u.choose(&candidates)?.clone();
        let (parent_ptr, key) = match at.rfind('/') {
            Some(i) => (
                at[..i].to_string(),
                at[i + 1..].replace("~1", "/").replace("~0", "~"),
            ),
            None => (String::new(), String::new()),
        };
        match u.int_in_range(0..=5u8)? {
            // replace with anything
            0 | 1 => {
                if let Some(slot) = v.pointer_mut(&at) {
                    *slot = json(u, 3)?;
                }
            }
            // remove the field (or the array element)
            2 => match v.pointer_mut(&parent_ptr) {
                Some(Value::Object(map)) if !at.is_empty() => {
                    map.remove(&key);
                }
                Some(Value::Array(items)) if !at.is_empty() => {
                    if let Ok(i) = key.parse::<usize>()
                        && i < items.len()
                    {
                        items.remove(i);
                    }
                }
                _ => {}
            },
            // same place, a meaningful string or an edge number
            3 => {
                let new = if u.arbitrary()? {
                    Value::String(string(u)?)
                } else {
                    Value::Number(edge_number(u)?)
                };
                if let Some(slot) = v.pointer_mut(&at) {
                    *slot = new;
                }
            }
            // null
            4 => {
                if let Some(slot) = v.pointer_mut(&at) {
                    *slot = Value::Null;
                }
            }
            // add a key to an object (or an element to an array)
            _ => {
                let key = string(u)?;
                let value = json(u, 2)?;
                match v.pointer_mut(&at) {
                    Some(Value::Object(map)) => {
                        map.insert(key, value);
                    }
                    Some(Value::Array(items)) => items.push(value),
                    _ => {}
                }
            }
        }
    }
    Ok(v)
}
