//! A spec the webhook recorded as valid (`status.lastValidSpec` of a
//! HighAvailabilityPolicy, the last-valid annotation of a policy
//! ConfigMap), read back by a restarted webhook while the object's current
//! version is invalid.
//!
//! The recorded spec is what the objects run now. When this release refuses
//! some of its settings (a rule the recording release did not have), the
//! settings its errors name are left out one at a time until the rest
//! passes every rule (a field an item of a list needs leaves the item out):
//! the namespace stays governed, and the engine still only sees a spec that
//! passes every rule. A spec that does not parse, or whose remains are
//! refused whole (a bad targetNamespace), is not applied.

use serde_json::Value;

use super::{HighAvailabilityPolicy, Path, Policy, PolicyError, Step, schema_check};

/// At most this many settings are left out (a recorded spec holds far fewer).
const MAX_LEFT_OUT: usize = 64;

/// A recorded spec as this release applies it.
#[derive(Clone, Debug, PartialEq)]
pub struct Recorded {
    /// The recorded spec, less the settings in `refusal`.
    pub policy: Policy,
    /// Why this release refuses the recorded spec as it is (`None`: it
    /// passes every rule).
    pub refusal: Option<Refusal>,
}

/// This release's errors for a recorded spec it applies in part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// Every error of the recorded spec, each naming the field and value.
    pub errors: Vec<String>,
    /// The settings left out (field paths, in the spec as recorded).
    pub left_out: Vec<String>,
}

/// Reads back the spec recorded for policy `name`. `Err`: it does not parse
/// under this release, or nothing of it passes this release's rules.
pub fn recorded(name: &str, spec: &Value) -> Result<Recorded, PolicyError> {
    let errors = match Policy::from_resource(&parse(name, spec)?) {
        Ok(policy) => {
            return Ok(Recorded {
                policy,
                refusal: None,
            });
        }
        Err(e) => e.flatten(),
    };
    // The spec as recorded, with a null in place of every list item left
    // out, so that paths keep naming the items as recorded.
    let mut spec = spec.clone();
    let mut left_out: Vec<Path> = Vec::new();
    let mut current = errors.clone();
    while left_out.len() < MAX_LEFT_OUT {
        let Some(setting) = current.iter().find_map(in_spec) else {
            break;
        };
        let Some(removed) = leave_out(name, &mut spec, setting) else {
            break;
        };
        left_out.retain(|p| !p.0.starts_with(&removed.0));
        left_out.push(removed);
        match Policy::from_resource(&parse(name, &compact(&spec))?) {
            Ok(policy) => {
                return Ok(Recorded {
                    policy,
                    refusal: Some(Refusal {
                        errors: errors.iter().map(ToString::to_string).collect(),
                        left_out: left_out.iter().map(ToString::to_string).collect(),
                    }),
                });
            }
            Err(e) => current = e.flatten(),
        }
    }
    Err(PolicyError::from_list(errors))
}

/// The recorded spec as a resource: the structural check of the schema
/// (unknown fields, types, required fields, enums), then decoding.
fn parse(name: &str, spec: &Value) -> Result<HighAvailabilityPolicy, PolicyError> {
    let mut doc = serde_json::json!({
        "apiVersion": super::API_VERSION,
        "kind": super::KIND,
        "metadata": {"name": name},
        "spec": spec,
    });
    let errors = schema_check::check_document(&mut doc);
    if !errors.is_empty() {
        return Err(PolicyError::from_list(errors));
    }
    serde_json::from_value(doc).map_err(|e| PolicyError::Parse(e.to_string()))
}

/// The steps below `spec` of the setting an error names.
fn in_spec(error: &PolicyError) -> Option<&[Step]> {
    let PolicyError::Invalid { path, .. } = error else {
        return None;
    };
    match path.0.split_first() {
        Some((Step::Key(spec), below)) if spec == "spec" && !below.is_empty() => Some(below),
        _ => None,
    }
}

/// The spec with the items left out (nulls) taken out of every list.
fn compact(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), compact(v))).collect())
        }
        Value::Array(items) => items.iter().filter(|v| !v.is_null()).map(compact).collect(),
        other => other.clone(),
    }
}

/// A path of the compacted spec as a path of `spec` (where the items left
/// out are still counted).
fn as_recorded(spec: &Value, compacted: &[Step]) -> Option<Vec<Step>> {
    let mut at = spec;
    let recorded = compacted.iter().map(|step| match step {
        Step::Key(k) => {
            at = at.get(k.as_str()).unwrap_or(&Value::Null);
            Some(step.clone())
        }
        Step::Index(i) => {
            let items = at.as_array()?.iter().enumerate();
            let (index, item) = items.filter(|(_, v)| !v.is_null()).nth(*i)?;
            at = item;
            Some(Step::Index(index))
        }
    });
    recorded.collect()
}

/// Leaves out the setting at `setting` (steps below `spec`, in the
/// compacted spec): the field itself, or else the innermost list item
/// holding it, whichever first leaves a spec that parses. Returns the path
/// left out, in the spec as recorded.
fn leave_out(name: &str, spec: &mut Value, setting: &[Step]) -> Option<Path> {
    let steps = as_recorded(spec, setting)?;
    let items = (1..steps.len())
        .rev()
        .filter(|&n| matches!(steps[n], Step::Index(_)));
    for len in std::iter::once(steps.len()).chain(items.map(|n| n + 1)) {
        let mut candidate = spec.clone();
        if remove(&mut candidate, &steps[..len]) && parse(name, &compact(&candidate)).is_ok() {
            *spec = candidate;
            let mut path = Path::from(["spec"]);
            path.0.extend_from_slice(&steps[..len]);
            return Some(path);
        }
    }
    None
}

/// Removes the value at `steps` (a list item becomes null); false when
/// there is none.
fn remove(value: &mut Value, steps: &[Step]) -> bool {
    let Some((last, parents)) = steps.split_last() else {
        return false;
    };
    let parent = parents.iter().try_fold(value, |at, step| match step {
        Step::Key(k) => at.get_mut(k.as_str()),
        Step::Index(i) => at.get_mut(*i),
    });
    match (last, parent) {
        (Step::Key(k), Some(Value::Object(map))) => map.remove(k).is_some(),
        (Step::Index(i), Some(Value::Array(items))) => match items.get_mut(*i) {
            Some(item) if !item.is_null() => {
                *item = Value::Null;
                true
            }
            _ => false,
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(spec: Value) -> Recorded {
        recorded("serving", &spec).expect("the recorded spec applies")
    }

    #[test]
    fn a_recorded_spec_valid_under_this_release_applies_whole() {
        let r = read(json!({"targetNamespace": "knative-serving", "replicas": 3}));
        assert_eq!(
            (r.policy.name.as_str(), r.policy.spec.replicas),
            ("serving", Some(3))
        );
        assert_eq!(r.refusal, None);
    }

    #[test]
    fn the_settings_this_release_refuses_are_left_out_and_the_rest_applies() {
        let r = read(json!({"targetNamespace": "knative-serving", "replicas": 3,
            "leaderElection": {"buckets": 5, "renewDeadline": "11s", "retryPeriod": "10s"},
            "podDisruptionBudget": {"minAvailable": "100%"}}));
        let spec = &r.policy.spec;
        assert_eq!(spec.replicas, Some(3));
        let le = spec.leader_election.as_ref().unwrap();
        assert_eq!((le.buckets, le.renew_deadline.as_deref()), (Some(5), None));
        assert_eq!(le.retry_period.as_deref(), Some("10s"));
        assert_eq!(spec.pod_disruption_budget, None);
        let refusal = r.refusal.unwrap();
        assert_eq!(
            refusal.left_out,
            [
                "spec.leaderElection.renewDeadline",
                "spec.podDisruptionBudget"
            ]
        );
        assert_eq!(refusal.errors.len(), 2, "{:?}", refusal.errors);
        assert!(refusal.errors[0].starts_with("spec.leaderElection.renewDeadline: "));
        assert!(refusal.errors[1].starts_with("spec.podDisruptionBudget.minAvailable: "));
    }

    #[test]
    fn a_field_a_list_item_needs_leaves_the_item_out() {
        let r = read(json!({"targetNamespace": "knative-serving",
            "workloads": [{"name": "activator", "replicas": 5},
                          {"name": "activator", "replicas": 7},
                          {"name": "Bad Name", "replicas": 2}],
            "topologySpreadConstraints": [{"topologyKey": "has space"}]}));
        let names: Vec<(&str, Option<i32>)> = r
            .policy
            .spec
            .workloads
            .iter()
            .map(|w| (w.name.as_str(), w.replicas))
            .collect();
        assert_eq!(names, [("activator", Some(5))]);
        assert_eq!(r.policy.spec.topology_spread_constraints, None);
        assert_eq!(
            r.refusal.unwrap().left_out,
            [
                "spec.topologySpreadConstraints",
                "spec.workloads[1]",
                "spec.workloads[2]"
            ]
        );
    }

    #[test]
    fn a_spec_that_does_not_parse_or_governs_nothing_is_not_applied() {
        let unknown = recorded("serving", &json!({"targetNamespace": "ns", "replicaz": 3}));
        assert!(unknown.unwrap_err().to_string().contains("replicaz"));
        let wrong_type = recorded(
            "serving",
            &json!({"targetNamespace": "ns", "replicas": "3"}),
        );
        assert!(
            wrong_type
                .unwrap_err()
                .to_string()
                .starts_with("spec.replicas: ")
        );
        let bad_namespace = recorded("serving", &json!({"targetNamespace": "Not A Namespace"}));
        let err = bad_namespace.unwrap_err().to_string();
        assert!(err.starts_with("spec.targetNamespace: "), "{err}");
    }

    #[test]
    fn an_error_carries_its_path_as_steps() {
        let spec = json!({"targetNamespace": "knative-serving", "workloads": [
            {"name": "a"}, {"name": "b"},
            {"name": "c", "podAntiAffinity": {"type": "Preferred", "topologyKey": " "}}]});
        let errors = Policy::from_resource(&parse("serving", &spec).unwrap())
            .unwrap_err()
            .flatten();
        assert_eq!(
            in_spec(&errors[0]),
            Some(
                &[
                    Step::Key("workloads".into()),
                    Step::Index(2),
                    Step::Key("podAntiAffinity".into()),
                    Step::Key("topologyKey".into()),
                ][..]
            )
        );
        assert!(
            errors[0]
                .to_string()
                .starts_with("spec.workloads[2].podAntiAffinity.topologyKey: ")
        );
        let exclude = Path(vec![Step::Key("exclude".into()), Step::Index(0)]);
        assert_eq!(exclude.to_string(), "exclude[0]");
    }
}
