//! Field ownership after a reconciler write (docs/reconcile.md, "Field
//! ownership"): a JSON patch is an `Update`, so each field the write changed
//! goes to [`FIELD_MANAGER`]; each one it took from a server-side applier
//! alone goes back to that applier, at the value written, so the applier's
//! next apply of the release does not conflict. A field an `Update` manager
//! owned is never handed to it (an `Update` never conflicts), and one
//! several appliers shared, or nobody owned, stays with [`FIELD_MANAGER`].
//!
//! [`FIELD_MANAGER`]: super::objects::FIELD_MANAGER

use serde_json::{Map, Value};

/// One field of a `FieldsV1` set: the keys from the root (`f:spec`,
/// `k:{...}`, ...), ending in `.` where the member is a map or list node
/// that also has members below it.
type Field = Vec<String>;

/// The `managedFields` to write after `manager` wrote `before` into
/// `after`: every field of `manager`'s `Update` entry that another manager
/// owned in `before` moved back to that manager. `None` when nothing
/// moves.
pub fn handed_back(before: &Value, after: &Value, manager: &str) -> Option<Vec<Value>> {
    let mut entries = after["metadata"]["managedFields"].as_array()?.clone();
    let ours = entries.iter().position(|e| is_update_of(e, manager))?;
    let previous: Vec<&Value> = before["metadata"]["managedFields"]
        .as_array()
        .map(|a| a.iter().filter(|e| is_other_owner(e, manager)).collect())
        .unwrap_or_default();
    let mut moved = false;
    for field in members(&entries[ours]["fieldsV1"]) {
        let mut owners = previous.iter().filter(|e| contains(&e["fieldsV1"], &field));
        // One server-side applier's value, replaced: its field again.
        let (Some(owner), None) = (owners.next(), owners.next()) else {
            continue;
        };
        if owner["operation"] != "Apply" {
            continue;
        }
        remove(&mut entries[ours]["fieldsV1"], &field);
        let at = match entries.iter().position(|e| same_entry(e, owner)) {
            Some(at) => at,
            None => {
                let mut revived = (*owner).clone();
                revived["fieldsV1"] = Value::Object(Map::new());
                entries.push(revived);
                entries.len() - 1
            }
        };
        insert(&mut entries[at]["fieldsV1"], &field);
        moved = true;
    }
    if !moved {
        return None;
    }
    if entries[ours]["fieldsV1"]
        .as_object()
        .is_none_or(Map::is_empty)
    {
        entries.remove(ours);
    }
    Some(entries)
}

fn is_update_of(entry: &Value, manager: &str) -> bool {
    entry["manager"] == manager && entry["operation"] == "Update" && is_main_resource(entry)
}

/// Another manager's entry on the object itself (a subresource's entry,
/// such as the HPA controller's `scale`, is left as it is).
fn is_other_owner(entry: &Value, manager: &str) -> bool {
    entry["manager"] != manager && is_main_resource(entry) && entry["fieldsV1"].is_object()
}

fn is_main_resource(entry: &Value) -> bool {
    entry["subresource"].as_str().is_none_or(str::is_empty)
}

/// The API server tells entries apart by manager, operation and, for
/// updates, API version.
fn same_entry(a: &Value, b: &Value) -> bool {
    ["manager", "operation", "apiVersion", "subresource"]
        .iter()
        .all(|k| a[k] == b[k])
}

/// Every member of a `FieldsV1` set.
fn members(set: &Value) -> Vec<Field> {
    fn walk(node: &Map<String, Value>, prefix: &mut Field, out: &mut Vec<Field>) {
        for (key, child) in node {
            prefix.push(key.clone());
            match child.as_object() {
                Some(below) if key != "." && !below.is_empty() => walk(below, prefix, out),
                _ => out.push(prefix.clone()),
            }
            prefix.pop();
        }
    }
    let mut out = Vec::new();
    if let Some(root) = set.as_object() {
        walk(root, &mut Vec::new(), &mut out);
    }
    out
}

fn contains(set: &Value, field: &[String]) -> bool {
    field
        .iter()
        .try_fold(set, |node, key| node.get(key))
        .is_some()
}

/// Removes one member, and every node it leaves empty (an empty node would
/// claim the node itself).
fn remove(set: &mut Value, field: &[String]) {
    let (Some((first, rest)), Some(node)) = (field.split_first(), set.as_object_mut()) else {
        return;
    };
    if let Some(child) = node.get_mut(first) {
        remove(child, rest);
        if rest.is_empty() || child.as_object().is_some_and(Map::is_empty) {
            node.remove(first);
        }
    }
}

fn insert(set: &mut Value, field: &[String]) {
    let mut node = set;
    for key in field {
        if !node.is_object() {
            *node = Value::Object(Map::new());
        }
        node = node
            .as_object_mut()
            .expect("made an object above")
            .entry(key.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const OURS: &str = "knative-ha-webhook-reconciler";

    fn object(entries: Value) -> Value {
        json!({"metadata": {"managedFields": entries}})
    }

    fn entry(manager: &str, operation: &str, fields: Value) -> Value {
        json!({"manager": manager, "operation": operation, "apiVersion": "autoscaling/v2",
               "fieldsType": "FieldsV1", "fieldsV1": fields})
    }

    #[test]
    fn a_field_taken_from_the_applier_goes_back_to_it() {
        let before = object(json!([entry(
            "kubectl",
            "Apply",
            json!({"f:spec": {"f:minReplicas": {}, "f:maxReplicas": {}}})
        )]));
        let after = object(json!([
            entry("kubectl", "Apply", json!({"f:spec": {"f:maxReplicas": {}}})),
            entry(
                OURS,
                "Update",
                json!({"f:metadata": {"f:annotations": {".": {}, "f:knativeha.dev/x": {}}},
                       "f:spec": {"f:minReplicas": {}}})
            ),
        ]));
        let entries = handed_back(&before, &after, OURS).expect("one field moves");
        assert_eq!(
            entries,
            vec![
                entry(
                    "kubectl",
                    "Apply",
                    json!({"f:spec": {"f:maxReplicas": {}, "f:minReplicas": {}}})
                ),
                entry(
                    OURS,
                    "Update",
                    json!({"f:metadata": {"f:annotations": {".": {}, "f:knativeha.dev/x": {}}}})
                ),
            ]
        );
    }

    #[test]
    fn an_owner_whose_only_field_was_taken_comes_back_and_an_emptied_entry_goes() {
        let applier = entry("kubectl", "Apply", json!({"f:spec": {"f:minReplicas": {}}}));
        let before = object(json!([applier.clone()]));
        let after = object(json!([entry(
            OURS,
            "Update",
            json!({"f:spec": {"f:minReplicas": {}}})
        )]));
        assert_eq!(handed_back(&before, &after, OURS), Some(vec![applier]));
    }

    #[test]
    fn fields_nobody_owned_and_subresource_owners_stay_as_they_are() {
        let scale = json!({"manager": "kube-controller-manager", "operation": "Update",
            "subresource": "scale", "fieldsV1": {"f:spec": {"f:replicas": {}}}});
        let before = object(json!([scale]));
        let after = object(json!([
            scale,
            entry(OURS, "Update", json!({"f:spec": {"f:replicas": {}}}))
        ]));
        assert_eq!(handed_back(&before, &after, OURS), None);
        assert_eq!(
            handed_back(&object(json!([])), &object(json!([])), OURS),
            None
        );
    }

    #[test]
    fn a_field_several_appliers_shared_stays_with_the_reconciler() {
        let before = object(json!([
            entry("kubectl", "Apply", json!({"f:spec": {"f:minReplicas": {}}})),
            entry(
                "argocd-controller",
                "Apply",
                json!({"f:spec": {"f:minReplicas": {}}})
            ),
        ]));
        let after = object(json!([entry(
            OURS,
            "Update",
            json!({"f:spec": {"f:minReplicas": {}}})
        )]));
        assert_eq!(handed_back(&before, &after, OURS), None);
    }

    #[test]
    fn a_field_of_a_client_side_apply_is_not_handed_to_it() {
        let before = object(json!([entry(
            "kubectl-client-side-apply",
            "Update",
            json!({"f:spec": {"f:minReplicas": {}, "f:maxReplicas": {}}})
        )]));
        let after = object(json!([
            entry(
                "kubectl-client-side-apply",
                "Update",
                json!({"f:spec": {"f:maxReplicas": {}}})
            ),
            entry(OURS, "Update", json!({"f:spec": {"f:minReplicas": {}}})),
        ]));
        assert_eq!(handed_back(&before, &after, OURS), None);
    }
}
