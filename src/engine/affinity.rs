//! Pod anti-affinity: the policy's term is marked (a `matchExpressions`
//! entry `knativeha.dev/anti-affinity DoesNotExist`, which every pod
//! satisfies, so scheduling is unchanged) so the engine can find and replace
//! its own term later. Terms it did not create (Knative ships a preferred
//! hostname term) are never removed.

use serde_json::{Map, Value, json};

use super::patch::{PatchError, Patcher};
use crate::policy::{AntiAffinityType, PodAntiAffinity};

/// The pod label the Deployment controller gives each ReplicaSet's pods.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";

/// A Deployment's selector labels, which the policy's term selects.
pub(crate) const MATCH_LABELS: &[&str] = &["spec", "selector", "matchLabels"];
/// A Deployment's pod anti-affinity.
pub(crate) const ANTI_AFFINITY: &[&str] =
    &["spec", "template", "spec", "affinity", "podAntiAffinity"];

/// The label key of the marker expression.
pub const MARKER_KEY: &str = "knativeha.dev/anti-affinity";
pub const REQUIRED: &str = "requiredDuringSchedulingIgnoredDuringExecution";
pub const PREFERRED: &str = "preferredDuringSchedulingIgnoredDuringExecution";

/// Why the pod anti-affinity is not a shape the engine can rewrite.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AffinityError {
    #[error("{} must be an object", ANTI_AFFINITY.join("."))]
    NotAnObject,
    /// One of the term lists ([`REQUIRED`], [`PREFERRED`]) is not a list.
    #[error("{}.{list} must be a list", ANTI_AFFINITY.join("."))]
    NotAList { list: &'static str },
}

/// The marker `matchExpressions` entry.
pub fn marker() -> Value {
    json!({"key": MARKER_KEY, "operator": "DoesNotExist"})
}

/// The list and the (marked) term the policy adds; None for type None.
pub fn policy_term(aa: &PodAntiAffinity, match_labels: &Value) -> Option<(&'static str, Value)> {
    // `matchLabelKeys`: only pods of the same revision count (the previous
    // ReplicaSet's terminating pods would otherwise keep a replacement off
    // the node or zone they leave). Beta and on by default since
    // Kubernetes 1.31; an API server without it drops the field.
    let term = json!({
        "labelSelector": {"matchLabels": match_labels, "matchExpressions": [marker()]},
        "matchLabelKeys": [POD_TEMPLATE_HASH],
        "topologyKey": aa.topology_key(),
    });
    match aa.kind {
        AntiAffinityType::Required => Some((REQUIRED, term)),
        AntiAffinityType::Preferred => {
            Some((PREFERRED, json!({"weight": 100, "podAffinityTerm": term})))
        }
        AntiAffinityType::None => None,
    }
}

fn pod_term<'v>(list: &str, item: &'v Value) -> Option<&'v Map<String, Value>> {
    if list == PREFERRED {
        item.get("podAffinityTerm")?.as_object()
    } else {
        item.as_object()
    }
}

/// True when the term carries the marker: the engine created it.
pub fn is_marked(list: &str, item: &Value) -> bool {
    pod_term(list, item)
        .and_then(|t| t.get("labelSelector")?.get("matchExpressions")?.as_array())
        .is_some_and(|exprs| {
            exprs
                .iter()
                .any(|e| e.get("key").and_then(Value::as_str) == Some(MARKER_KEY))
        })
}

/// The labelSelector of `item` when it is a term on `aa`'s topologyKey
/// and its selector alone (weight 100 for Preferred; `exact`: nothing else
/// beside the weight).
fn term_selector<'v>(
    aa: &PodAntiAffinity,
    list: &str,
    item: &'v Value,
    exact: bool,
) -> Option<&'v Map<String, Value>> {
    if list == PREFERRED {
        let obj = item.as_object()?;
        if obj.get("weight") != Some(&json!(100)) || (exact && obj.len() != 2) {
            return None;
        }
    }
    let term = pod_term(list, item)?;
    let key = term.get("topologyKey").and_then(Value::as_str);
    if term.len() != 2 || key != Some(aa.topology_key()) {
        return None;
    }
    term.get("labelSelector")?.as_object()
}

/// True for a term the engine did not create that already keeps replicas
/// apart as the policy asks: same topologyKey (weight 100 for Preferred),
/// `matchLabels` a non-empty subset of the Deployment's selector. Knative
/// ships such terms (`app: activator`); no need to add ours next to it.
fn equivalent(
    aa: &PodAntiAffinity,
    list: &str,
    item: &Value,
    selector: &Map<String, Value>,
) -> bool {
    let Some(ls) = term_selector(aa, list, item, false) else {
        return false;
    };
    let Some(Value::Object(labels)) = ls.get("matchLabels") else {
        return false;
    };
    ls.len() == 1 && !labels.is_empty() && labels.iter().all(|(k, v)| selector.get(k) == Some(v))
}

/// True when `item` is exactly the term [`policy_term`] builds (compared
/// without building it: this runs on every admission).
fn is_policy_term(
    aa: &PodAntiAffinity,
    selector: &Map<String, Value>,
    list: &str,
    item: &Value,
) -> bool {
    let Some(ls) = term_selector(aa, list, item, true) else {
        return false;
    };
    let marker_only = ls
        .get("matchExpressions")
        .and_then(Value::as_array)
        .is_some_and(|e| {
            e.len() == 1
                && e[0].as_object().is_some_and(|m| m.len() == 2)
                && e[0].get("key").and_then(Value::as_str) == Some(MARKER_KEY)
                && e[0].get("operator").and_then(Value::as_str) == Some("DoesNotExist")
        });
    ls.len() == 2
        && ls.get("matchLabels").and_then(Value::as_object) == Some(selector)
        && marker_only
}

/// True when [`wanted`] would return `current` unchanged, checked without
/// copying anything: every marked term is the policy's own, last in its
/// list, and exactly one of (it, an equivalent unmarked term) is there.
fn unchanged(
    want: Option<(&PodAntiAffinity, &'static str)>,
    selector: &Map<String, Value>,
    cur: &Map<String, Value>,
) -> Result<bool, AffinityError> {
    let (mut foreign_marked, mut have_ours, mut have_equivalent) = (false, false, false);
    for list in [REQUIRED, PREFERRED] {
        let items = match cur.get(list) {
            None | Some(Value::Null) => continue,
            Some(Value::Array(items)) => items,
            Some(_) => return Err(AffinityError::NotAList { list }),
        };
        let wanted_here = want.filter(|(_, l)| *l == list).map(|(aa, _)| aa);
        for (i, item) in items.iter().enumerate() {
            match wanted_here {
                Some(aa) if is_marked(list, item) => {
                    let ours = !have_ours
                        && i + 1 == items.len()
                        && is_policy_term(aa, selector, list, item);
                    have_ours |= ours;
                    foreign_marked |= !ours;
                }
                Some(aa) => have_equivalent |= equivalent(aa, list, item, selector),
                None => foreign_marked |= is_marked(list, item),
            }
        }
    }
    Ok(!foreign_marked
        && match want {
            None => true,
            Some(_) => have_ours != have_equivalent,
        })
}

/// The podAntiAffinity the policy wants: `current` without the engine's
/// own terms, plus the policy's term unless an equivalent term is there.
/// `Ok(None)` when that is what `current` already holds, except that an
/// empty podAntiAffinity (what removing the engine's own term left when it
/// was the only one) goes too: `{}`, which `put` removes. `aa` None (or
/// type None) removes only the engine's own terms.
pub fn wanted(
    aa: Option<&PodAntiAffinity>,
    selector: &Map<String, Value>,
    current: Option<&Value>,
) -> Result<Option<Value>, AffinityError> {
    let empty = Map::new();
    let cur = match current {
        None | Some(Value::Null) => &empty,
        Some(Value::Object(m)) => m,
        Some(_) => return Err(AffinityError::NotAnObject),
    };
    let same = || (cur.is_empty() && current.is_some_and(Value::is_object)).then(|| json!({}));
    let want = aa
        .filter(|a| a.kind != AntiAffinityType::None && !selector.is_empty())
        .map(|a| {
            (
                a,
                if a.kind == AntiAffinityType::Required {
                    REQUIRED
                } else {
                    PREFERRED
                },
            )
        });
    if unchanged(want, selector, cur)? {
        return Ok(same());
    }
    let mut out = cur.clone();
    for list in [REQUIRED, PREFERRED] {
        match out.get_mut(list) {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => {
                let before = items.len();
                items.retain(|i| !is_marked(list, i));
                if items.is_empty() && before > 0 {
                    out.remove(list);
                }
            }
            Some(_) => return Err(AffinityError::NotAList { list }),
        }
    }
    let term = aa
        .filter(|_| !selector.is_empty())
        .and_then(|aa| Some((aa, policy_term(aa, &Value::Object(selector.clone()))?)));
    if let Some((aa, (list, term))) = term {
        let items = out.entry(list).or_insert_with(|| json!([]));
        if items.is_null() {
            *items = json!([]);
        }
        if let Value::Array(items) = items
            && !items.iter().any(|i| equivalent(aa, list, i, selector))
        {
            items.push(term);
        }
    }
    if &out == cur {
        Ok(same())
    } else {
        Ok(Some(Value::Object(out)))
    }
}

/// Writes `value` ([`wanted`]) as the pod anti-affinity in `p`; `{}`
/// removes it, with an `affinity` it leaves empty.
pub(crate) fn put(p: &mut Patcher, value: Value) -> Result<(), PatchError> {
    if value.as_object().is_some_and(Map::is_empty) {
        p.remove_pruned(ANTI_AFFINITY);
    } else {
        p.set(ANTI_AFFINITY, value)?;
    }
    Ok(())
}
