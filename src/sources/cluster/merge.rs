//! Pure merge rules: from every policy object the watchers know to the one
//! policy in force per target namespace, plus a verdict per object.
//!
//! - Only the last *valid* version of an object can be in force; an invalid
//!   edit keeps the previous valid version of that same object.
//! - A HighAvailabilityPolicy resource wins over a ConfigMap.
//! - Within one origin, the oldest object wins (creation time, then name);
//!   the others are in conflict.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;

use crate::policy::Policy;
use crate::policy::recorded::Refusal;
use crate::scope::AllowedNamespaces;

/// Where a policy object comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Origin {
    /// A cluster-scoped HighAvailabilityPolicy resource.
    Resource,
    /// A labelled ConfigMap in the webhook's namespace.
    ConfigMap,
}

impl Origin {
    /// How the origin is named in messages (`kind/name`).
    pub fn kind(self) -> &'static str {
        match self {
            Origin::Resource => crate::policy::KIND,
            Origin::ConfigMap => "ConfigMap",
        }
    }
}

/// One policy object as last seen, with the last valid version of it.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyObject {
    pub origin: Origin,
    /// `metadata.uid` (or the name when the API server sent none).
    pub uid: String,
    pub name: String,
    /// The object's own namespace (ConfigMaps only).
    pub namespace: Option<String>,
    pub created: Option<Timestamp>,
    pub generation: Option<i64>,
    pub resource_version: Option<String>,
    /// The last valid version of this object, if it ever had one (seen by
    /// this process, or recorded in the object by an earlier one).
    pub last_valid: Option<Arc<Policy>>,
    /// `metadata.generation` of `last_valid` (HighAvailabilityPolicy only).
    pub last_valid_generation: Option<i64>,
    /// Set when `last_valid` is a recorded version this release refuses in
    /// part: it applies without the settings refused.
    pub last_valid_refusal: Option<Refusal>,
    /// Why the current version is invalid (None when it is valid).
    pub error: Option<String>,
    /// The `spec.targetNamespace` the current version names, valid or not
    /// (None when none can be read): a namespace it claims.
    pub target: Option<String>,
}

impl PolicyObject {
    /// `Kind/name` for messages.
    pub fn display(&self) -> String {
        format!("{}/{}", self.origin.kind(), self.name)
    }
}

/// What the merge decided about one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Valid and in force for its target namespace.
    Valid { namespace: String },
    /// The current version is invalid (the last valid version, if any, may
    /// still be in force: see `kept`, `kept_generation` for its generation
    /// when known, and `refusal` when it is kept without the settings this
    /// release refuses).
    Invalid {
        message: String,
        kept: bool,
        kept_generation: Option<i64>,
        refusal: Option<Refusal>,
    },
    /// Valid, but another object governs the same namespace.
    Conflict { namespace: String, winner: String },
    /// Valid, but its namespace is not in `--governed-namespaces`.
    NotGoverned { namespace: String, governed: String },
}

impl Verdict {
    /// `valid`, `invalid` or `conflict` (the `state` metric label).
    pub fn state(&self) -> &'static str {
        match self {
            Verdict::Valid { .. } => "valid",
            Verdict::Invalid { .. } => "invalid",
            Verdict::Conflict { .. } => "conflict",
            Verdict::NotGoverned { .. } => "not_governed",
        }
    }
}

/// The merge result.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Merged {
    /// The policy in force per target namespace.
    pub policies: BTreeMap<String, Arc<Policy>>,
    /// Which object each in-force policy comes from (`Kind/name`).
    pub winners: BTreeMap<String, (Origin, String)>,
    /// Verdict per object, keyed by (origin, uid).
    pub verdicts: BTreeMap<(Origin, String), Verdict>,
}

/// Applies the precedence rules to `objects` (every namespace governed).
pub fn merge<'a>(objects: impl IntoIterator<Item = &'a PolicyObject>) -> Merged {
    merge_governed(objects, &AllowedNamespaces::all())
}

/// Applies the precedence rules to `objects`; a policy for a namespace
/// outside `governed` is never in force (verdict `NotGoverned`).
pub fn merge_governed<'a>(
    objects: impl IntoIterator<Item = &'a PolicyObject>,
    governed: &AllowedNamespaces,
) -> Merged {
    let mut objects: Vec<&PolicyObject> = objects.into_iter().collect();
    // Resources before ConfigMaps; then oldest first (objects without a
    // creation time sort last); then by name; uid makes the order total.
    objects.sort_by_key(|o| (o.origin, o.created.is_none(), o.created, &o.name, &o.uid));
    let mut merged = Merged::default();
    for obj in objects {
        let key = (obj.origin, obj.uid.clone());
        let never_in_force = |message: &String| Verdict::Invalid {
            message: message.clone(),
            kept: false,
            kept_generation: None,
            refusal: None,
        };
        let Some(policy) = &obj.last_valid else {
            let message = obj
                .error
                .clone()
                .unwrap_or_else(|| "no valid policy".into());
            merged.verdicts.insert(key, never_in_force(&message));
            continue;
        };
        let namespace = policy.spec.target_namespace.clone();
        if !governed.allows(&namespace) {
            let verdict = obj.error.as_ref().map_or_else(
                || Verdict::NotGoverned {
                    namespace,
                    governed: governed.display(),
                },
                never_in_force,
            );
            merged.verdicts.insert(key, verdict);
            continue;
        }
        let winner = merged.winners.get(&namespace).cloned();
        let in_force = winner.is_none();
        if in_force {
            merged.policies.insert(namespace.clone(), policy.clone());
            merged
                .winners
                .insert(namespace.clone(), (obj.origin, obj.display()));
        }
        let verdict = match (&obj.error, winner) {
            (Some(message), _) => Verdict::Invalid {
                message: message.clone(),
                kept: in_force,
                kept_generation: obj.last_valid_generation.filter(|_| in_force),
                refusal: obj.last_valid_refusal.clone().filter(|_| in_force),
            },
            (None, None) => Verdict::Valid { namespace },
            (None, Some((_, winner))) => Verdict::Conflict { namespace, winner },
        };
        merged.verdicts.insert(key, verdict);
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::HighAvailabilityPolicySpec;

    fn policy(name: &str, ns: &str, replicas: i32) -> Arc<Policy> {
        Arc::new(Policy {
            name: name.to_string(),
            spec: HighAvailabilityPolicySpec {
                target_namespace: ns.to_string(),
                replicas: Some(replicas),
                ..Default::default()
            },
        })
    }

    fn ts(secs: i64) -> Option<Timestamp> {
        Some(Timestamp::from_second(1_700_000_000 + secs).unwrap())
    }

    fn obj(origin: Origin, name: &str, created: i64, ns: &str, replicas: i32) -> PolicyObject {
        PolicyObject {
            origin,
            uid: format!("uid-{name}"),
            name: name.to_string(),
            namespace: None,
            created: ts(created),
            generation: Some(1),
            resource_version: Some("1".into()),
            last_valid: Some(policy(name, ns, replicas)),
            last_valid_generation: Some(1),
            last_valid_refusal: None,
            error: None,
            target: Some(ns.to_string()),
        }
    }

    fn in_force(m: &Merged, ns: &str) -> Option<String> {
        m.policies.get(ns).map(|p| p.name.clone())
    }

    fn verdict<'a>(m: &'a Merged, origin: Origin, name: &str) -> &'a Verdict {
        &m.verdicts[&(origin, format!("uid-{name}"))]
    }

    #[test]
    fn single_resource_is_in_force_and_valid() {
        let objs = [obj(Origin::Resource, "a", 0, "knative-serving", 3)];
        let m = merge(&objs);
        assert_eq!(in_force(&m, "knative-serving").as_deref(), Some("a"));
        assert_eq!(
            verdict(&m, Origin::Resource, "a"),
            &Verdict::Valid {
                namespace: "knative-serving".into()
            }
        );
    }

    #[test]
    fn oldest_resource_wins_regardless_of_input_order() {
        let objs = [
            obj(Origin::Resource, "young", 10, "ns", 5),
            obj(Origin::Resource, "old", 1, "ns", 3),
        ];
        let m = merge(&objs);
        assert_eq!(in_force(&m, "ns").as_deref(), Some("old"));
        assert_eq!(
            verdict(&m, Origin::Resource, "young"),
            &Verdict::Conflict {
                namespace: "ns".into(),
                winner: "HighAvailabilityPolicy/old".into()
            }
        );
        assert_eq!(verdict(&m, Origin::Resource, "old").state(), "valid");
    }

    #[test]
    fn same_creation_time_falls_back_to_name() {
        let objs = [
            obj(Origin::Resource, "b", 5, "ns", 5),
            obj(Origin::Resource, "a", 5, "ns", 3),
        ];
        let m = merge(&objs);
        assert_eq!(in_force(&m, "ns").as_deref(), Some("a"));
        assert_eq!(verdict(&m, Origin::Resource, "b").state(), "conflict");
    }

    #[test]
    fn resource_wins_over_older_configmap() {
        let objs = [
            obj(Origin::ConfigMap, "cm", 0, "ns", 2),
            obj(Origin::Resource, "cr", 100, "ns", 4),
        ];
        let m = merge(&objs);
        assert_eq!(in_force(&m, "ns").as_deref(), Some("cr"));
        assert_eq!(
            verdict(&m, Origin::ConfigMap, "cm"),
            &Verdict::Conflict {
                namespace: "ns".into(),
                winner: "HighAvailabilityPolicy/cr".into()
            }
        );
    }

    #[test]
    fn configmap_governs_namespaces_without_a_resource() {
        let objs = [
            obj(Origin::ConfigMap, "cm", 0, "other", 2),
            obj(Origin::Resource, "cr", 100, "ns", 4),
        ];
        let m = merge(&objs);
        assert_eq!(in_force(&m, "other").as_deref(), Some("cm"));
        assert_eq!(in_force(&m, "ns").as_deref(), Some("cr"));
        assert_eq!(verdict(&m, Origin::ConfigMap, "cm").state(), "valid");
    }

    #[test]
    fn invalid_edit_keeps_last_valid_version_in_force() {
        let mut o = obj(Origin::Resource, "a", 0, "ns", 3);
        o.error = Some("spec.replicas: must be 1..=100".into());
        let m = merge([&o]);
        assert_eq!(m.policies["ns"].spec.replicas, Some(3));
        assert_eq!(
            verdict(&m, Origin::Resource, "a"),
            &Verdict::Invalid {
                message: "spec.replicas: must be 1..=100".into(),
                kept: true,
                kept_generation: Some(1),
                refusal: None,
            }
        );
    }

    #[test]
    fn policy_outside_the_governed_namespaces_is_never_in_force() {
        let objs = [
            obj(Origin::Resource, "a", 0, "knative-serving", 3),
            obj(Origin::ConfigMap, "b", 1, "default", 2),
        ];
        let m = merge_governed(&objs, &AllowedNamespaces::only(["knative-serving"]));
        assert_eq!(in_force(&m, "knative-serving").as_deref(), Some("a"));
        assert!(!m.policies.contains_key("default"));
        assert_eq!(
            verdict(&m, Origin::ConfigMap, "b"),
            &Verdict::NotGoverned {
                namespace: "default".into(),
                governed: "knative-serving".into()
            }
        );
        assert_eq!(verdict(&m, Origin::ConfigMap, "b").state(), "not_governed");
    }

    #[test]
    fn never_valid_object_governs_nothing() {
        let mut o = obj(Origin::Resource, "a", 0, "ns", 3);
        o.last_valid = None;
        o.error = Some("spec.targetNamespace: missing".into());
        let m = merge([&o]);
        assert!(m.policies.is_empty());
        assert_eq!(
            verdict(&m, Origin::Resource, "a"),
            &Verdict::Invalid {
                message: "spec.targetNamespace: missing".into(),
                kept: false,
                kept_generation: None,
                refusal: None,
            }
        );
    }

    #[test]
    fn invalid_loser_stays_invalid_and_younger_valid_loses_to_kept_version() {
        let mut old = obj(Origin::Resource, "old", 0, "ns", 3);
        old.error = Some("spec.replicas: bad".into());
        let young = obj(Origin::Resource, "young", 5, "ns", 7);
        let m = merge([&young, &old]);
        assert_eq!(in_force(&m, "ns").as_deref(), Some("old"));
        assert_eq!(verdict(&m, Origin::Resource, "young").state(), "conflict");
        assert_eq!(verdict(&m, Origin::Resource, "old").state(), "invalid");
    }

    #[test]
    fn a_refused_record_keeps_its_namespace_governed_and_the_verdict_says_so() {
        let refusal = Refusal {
            errors: vec!["spec.podDisruptionBudget.minAvailable: \"100%\" blocks".into()],
            left_out: vec!["spec.podDisruptionBudget".into()],
        };
        let mut old = obj(Origin::Resource, "old", 0, "ns", 3);
        old.error = Some("spec.replicas: bad".into());
        old.last_valid_refusal = Some(refusal.clone());
        let young = obj(Origin::Resource, "young", 5, "ns", 7);
        let m = merge([&young, &old]);
        assert_eq!(in_force(&m, "ns").as_deref(), Some("old"));
        assert_eq!(
            verdict(&m, Origin::Resource, "old"),
            &Verdict::Invalid {
                message: "spec.replicas: bad".into(),
                kept: true,
                kept_generation: Some(1),
                refusal: Some(refusal),
            }
        );
        // Not in force (outside the governed namespaces): no refusal to report.
        let m = merge_governed([&old], &AllowedNamespaces::only(["other"]));
        assert!(matches!(
            verdict(&m, Origin::Resource, "old"),
            Verdict::Invalid {
                kept: false,
                refusal: None,
                ..
            }
        ));
    }
}
