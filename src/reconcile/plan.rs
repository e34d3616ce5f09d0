//! Pure drift planning: what the engine would change on an object that
//! already exists, which of those changes touch the pod template (and so
//! roll the Deployment's pods), and the patch the reconciler sends.
use json_patch::{Patch, PatchOperation, TestOperation};
use serde::Serialize;
use serde_json::Value;

use crate::engine::{self, Answering, Change, EngineError, Input, Kind, Snapshot};

/// The JSON pointer of a Deployment's pod template.
pub const POD_TEMPLATE: &str = "/spec/template";

/// One change the policy asks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangeLine {
    /// The engine's change (its line reads e.g.
    /// `deployment/controller: spec.replicas 1 -> 3 (policy serving)`).
    pub change: Change,
    /// True when the change is in a Deployment's pod template: applying it
    /// starts a rollout (new pods).
    pub rolls_pods: bool,
}

/// How one governed object differs from its policy.
#[derive(Clone, Debug, PartialEq)]
pub struct Drift {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
    /// `metadata.resourceVersion` of the object the drift was computed on.
    pub resource_version: Option<String>,
    /// Every change the policy asks for.
    pub changes: Vec<ChangeLine>,
    /// The engine's patch, without pod template operations when those are
    /// excluded (see [`plan`]).
    pub patch: Patch,
    /// Operations left out of `patch`: pod template operations, and the
    /// writes that are unsafe without them (see [`plan`]).
    pub held_back: usize,
}

impl Drift {
    /// True when the changes include a pod template change.
    pub fn rolls_pods(&self) -> bool {
        self.changes.iter().any(|c| c.rolls_pods)
    }

    /// The patch to send: a `test` of `metadata.resourceVersion` first, so
    /// that the write fails instead of overwriting a concurrent writer.
    /// None when there is nothing to send (no resourceVersion or no ops).
    pub fn guarded_patch(&self) -> Option<Patch> {
        let rv = self.resource_version.as_ref()?;
        if self.patch.0.is_empty() {
            return None;
        }
        let mut ops = Vec::with_capacity(self.patch.0.len() + 1);
        ops.push(PatchOperation::Test(TestOperation {
            path: json_patch::jsonptr::PointerBuf::from_tokens(["metadata", "resourceVersion"]),
            value: Value::String(rv.clone()),
        }));
        ops.extend(self.patch.0.iter().cloned());
        Some(Patch(ops))
    }
}

/// The pointer of an operation (for `move`/`copy` the target).
pub fn op_path(op: &PatchOperation) -> String {
    match op {
        PatchOperation::Add(o) => o.path.to_string(),
        PatchOperation::Remove(o) => o.path.to_string(),
        PatchOperation::Replace(o) => o.path.to_string(),
        PatchOperation::Move(o) => o.path.to_string(),
        PatchOperation::Copy(o) => o.path.to_string(),
        PatchOperation::Test(o) => o.path.to_string(),
    }
}

/// True when the operation writes at or below `/spec/template` (or replaces
/// a parent of it, which rewrites the template too).
pub fn touches_pod_template(op: &PatchOperation) -> bool {
    let path = op_path(op);
    path == POD_TEMPLATE
        || path.starts_with("/spec/template/")
        || (!matches!(op, PatchOperation::Test(_))
            && POD_TEMPLATE.starts_with(&path)
            && POD_TEMPLATE[path.len()..].starts_with('/'))
        || (path.is_empty() && !matches!(op, PatchOperation::Test(_)))
}

/// True for the write of a record of a release value or of the engine's
/// last write ([`engine::kinds::record_annotations`]): an `add` of one, or
/// of the annotations the engine adds them in.
fn is_record(op: &PatchOperation) -> bool {
    let path = op_path(op);
    let record =
        |key: &str| engine::kinds::record_annotations().any(|a| a.replace('/', "~1") == key);
    matches!(op, PatchOperation::Add(_))
        && (path == "/metadata/annotations"
            || path
                .strip_prefix("/metadata/annotations/")
                .is_some_and(record))
}

/// Without the pod template ops, some other writes are unsafe on their own
/// (each kind says which: [`engine::kinds::KindSpec::held_with_template`]):
/// replicas != 1 on a Deployment that keeps `--disable-ha` (several
/// replicas without a leader), and `config-leader-election` keys (Knative
/// reads them at start only; the restart that goes with them is a pod
/// template change). Returns how many ops were held back and the rest.
fn hold_back_unsafe(
    kind: Kind,
    name: &str,
    object: &Value,
    mutated: Option<&Value>,
    ops: Vec<PatchOperation>,
) -> (usize, Vec<PatchOperation>) {
    let Some(held) = (kind.spec().held_with_template)(name, object, mutated) else {
        return (0, ops);
    };
    let unsafe_op = |op: &PatchOperation| {
        let path = op_path(op);
        path.strip_prefix(held)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    let (held, sent): (Vec<_>, Vec<_>) = ops.into_iter().partition(|op| unsafe_op(op));
    (held.len(), sent)
}

/// Computes the drift of one existing object (operation UPDATE, like the
/// admission request its write will produce). `Ok(None)`: in line, or not
/// a governed kind/namespace. With `pod_templates == false`, operations on
/// the pod template are left out of the patch (the changes still list them),
/// and so are the writes that are unsafe without them: a replicas change
/// on a Deployment that would keep `--disable-ha` with replicas != 1, and
/// the `config-leader-election` keys (their restart is a pod template change).
pub fn plan(
    snapshot: &Snapshot,
    namespace: &str,
    object: &Value,
    pod_templates: bool,
) -> Result<Option<Drift>, EngineError> {
    let input = Input::update(namespace, object);
    let outcome = engine::outcome(Answering::Governed(snapshot), &input)?;
    if outcome.mutation.is_empty() {
        return Ok(None);
    }
    let Some(kind) = Kind::of(object) else {
        return Ok(None);
    };
    let meta = &object["metadata"];
    let name = meta["name"].as_str().unwrap_or_default().to_string();
    let resource_version = meta["resourceVersion"].as_str().map(str::to_string);

    let (template_ops, other_ops): (Vec<_>, Vec<_>) = outcome
        .mutation
        .patch
        .0
        .iter()
        .cloned()
        .partition(touches_pod_template);

    let changes = outcome
        .mutation
        .changes
        .iter()
        .map(|c| ChangeLine {
            change: c.clone(),
            rolls_pods: c.what.in_pod_template(),
        })
        .collect();
    let (patch, held_back) = if pod_templates {
        (outcome.mutation.patch, 0)
    } else {
        let (held, mut sent) =
            hold_back_unsafe(kind, &name, object, outcome.object.as_ref(), other_ops);
        let mut held = template_ops.len() + held;
        if sent.iter().all(is_record) {
            // Records of the release values alone (their fields held back)
            // are not worth a write.
            held += sent.len();
            sent.clear();
        }
        (Patch(sent), held)
    };
    Ok(Some(Drift {
        kind,
        namespace: namespace.to_string(),
        name,
        resource_version,
        changes,
        patch,
        held_back,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::What;
    use crate::policy::Policy;
    use serde_json::json;

    fn governing() -> Snapshot {
        Snapshot::from_policies([Policy::from_yaml(
            "apiVersion: knativeha.dev/v1alpha1\nkind: HighAvailabilityPolicy\nmetadata: {name: serving}\nspec:\n  targetNamespace: knative-serving\n  replicas: 3\n  podAntiAffinity: {type: Preferred}\n",
        )
        .expect("policy")])
    }

    fn deployment(replicas: i64) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "controller", "namespace": "knative-serving", "resourceVersion": "7"},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": "controller"}},
                "template": {
                    "metadata": {"labels": {"app": "controller"}},
                    "spec": {"containers": [{"name": "controller", "image": "x"}]}
                }
            }
        })
    }

    fn paths(p: &Patch) -> Vec<String> {
        p.0.iter().map(op_path).collect()
    }

    #[test]
    fn template_changes_are_marked_and_can_be_held_back() {
        let d = plan(&governing(), "knative-serving", &deployment(1), true)
            .unwrap()
            .expect("drift");
        assert_eq!(d.changes.len(), 2, "{:?}", d.changes);
        let replicas = d
            .changes
            .iter()
            .find(|c| c.change.what == What::field("spec.replicas", "1", "3"))
            .expect("replicas line");
        assert!(!replicas.rolls_pods);
        let aa = d
            .changes
            .iter()
            .find(|c| matches!(c.change.what, What::AntiAffinitySet { .. }))
            .expect("anti-affinity line");
        assert!(aa.rolls_pods);
        assert!(
            paths(&d.patch)
                .iter()
                .any(|p| p.starts_with("/spec/template"))
        );
        assert_eq!(d.held_back, 0);

        let d = plan(&governing(), "knative-serving", &deployment(1), false)
            .unwrap()
            .expect("drift");
        // The record of the release's replicas goes with them.
        assert_eq!(
            paths(&d.patch),
            vec![
                "/metadata/annotations".to_string(),
                "/spec/replicas".to_string()
            ]
        );
        assert!(d.held_back > 0);
        assert_eq!(d.changes.len(), 2, "changes still listed");
    }

    #[test]
    fn only_template_drift_with_templates_excluded_leaves_an_empty_patch() {
        let d = plan(&governing(), "knative-serving", &deployment(3), false)
            .unwrap()
            .expect("drift");
        assert!(d.patch.0.is_empty());
        assert!(d.guarded_patch().is_none());
        assert!(d.rolls_pods());
    }

    #[test]
    fn guarded_patch_starts_with_a_resource_version_test() {
        let d = plan(&governing(), "knative-serving", &deployment(1), true)
            .unwrap()
            .expect("drift");
        let p = serde_json::to_value(d.guarded_patch().unwrap()).unwrap();
        assert_eq!(
            p[0],
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": "7"})
        );
        assert_eq!(p.as_array().unwrap().len(), d.patch.0.len() + 1);
    }

    #[test]
    fn in_line_and_foreign_objects_have_no_drift() {
        let pol = governing();
        let mut applied = deployment(1);
        let d = plan(&pol, "knative-serving", &applied, true)
            .unwrap()
            .unwrap();
        json_patch::patch(&mut applied, &d.patch).unwrap();
        assert_eq!(plan(&pol, "knative-serving", &applied, true).unwrap(), None);
        assert_eq!(plan(&pol, "other", &deployment(1), true).unwrap(), None);
    }

    #[test]
    fn template_pointer_classification() {
        use json_patch::jsonptr::PointerBuf;
        use json_patch::{AddOperation, ReplaceOperation};
        let add = |p: &str| {
            PatchOperation::Add(AddOperation {
                path: PointerBuf::parse(p).unwrap(),
                value: json!(1),
            })
        };
        let cases = [
            ("/spec/template/spec/affinity", true),
            ("/spec/template", true),
            ("/spec", true),
            ("/spec/replicas", false),
            ("/spec/templates", false),
            ("/data/lease-duration", false),
        ];
        for (path, want) in cases {
            assert_eq!(touches_pod_template(&add(path)), want, "{path}");
        }
        let replace_root = PatchOperation::Replace(ReplaceOperation {
            path: PointerBuf::new(),
            value: json!({}),
        });
        assert!(touches_pod_template(&replace_root));
    }
}
