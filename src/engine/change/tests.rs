use super::*;

fn replicas(before: &str, after: &str) -> What {
    What::field("spec.replicas", before, after)
}

#[test]
fn lines_render_the_cause() {
    let c = Change::new(
        "deployment",
        "controller",
        replicas("1", "3"),
        Cause::Policy("serving".into()),
    );
    assert_eq!(
        c.to_string(),
        "deployment/controller: spec.replicas 1 -> 3 (policy serving)"
    );
    let r = Change::new(
        "deployment",
        "controller",
        replicas("3", "1"),
        Cause::Restored,
    );
    assert_eq!(
        r.clone().undone_because("gone").to_string(),
        "deployment/controller: spec.replicas 3 -> 1 (gone: the release value, record removed)"
    );
    let u = Change::new(
        "deployment",
        "c",
        What::field("x", "1", REMOVED),
        Cause::Unstated,
    )
    .noted("restored; the pods roll");
    assert_eq!(
        u.undone_because("gone").detail(),
        "x 1 -> removed (restored; the pods roll) (gone)"
    );
}

#[test]
fn a_field_change_is_its_field_values_and_reason() {
    let c = Change::new(
        "deployment",
        "controller",
        What::field(
            "spec.strategy.rollingUpdate.maxUnavailable",
            "unset (25%)",
            "1",
        ),
        Cause::Policy("serving".into()),
    )
    .noted("Required anti-affinity with 3 replicas");
    let [f] = c.what.fields() else {
        panic!("one field: {:?}", c.what)
    };
    assert_eq!(f.field, "spec.strategy.rollingUpdate.maxUnavailable");
    assert_eq!(f.before.as_deref(), Some("unset (25%)"));
    assert_eq!(f.after, "1");
    assert_eq!(
        c.reason,
        Some(Reason::Noted(
            "Required anti-affinity with 3 replicas".into()
        ))
    );
    assert!(!c.is_warning());
    assert_eq!(
        c.detail(),
        "spec.strategy.rollingUpdate.maxUnavailable unset (25%) -> 1 (Required anti-affinity with 3 replicas) (policy serving)"
    );
}

#[test]
fn several_fields_share_one_line_and_its_reason() {
    let c = Change::new(
        "poddisruptionbudget",
        "activator-pdb",
        What::Fields(vec![
            FieldChange::new("spec.maxUnavailable", "unset", "1"),
            FieldChange::removed("spec.minAvailable", "80%"),
        ]),
        Cause::Policy("serving".into()),
    )
    .noted("the release sets it");
    assert_eq!(
        c.to_string(),
        "poddisruptionbudget/activator-pdb: spec.maxUnavailable unset -> 1, spec.minAvailable 80% -> removed (the release sets it) (policy serving)"
    );
    assert_eq!(c.what.fields()[1].after, REMOVED);
    let scaled = Change {
        reason: Some(Reason::Through {
            route: "the scale subresource",
            why: "it runs --disable-ha".into(),
        }),
        ..Change::new("deployment", "d", replicas("3", "1"), Cause::Unstated)
    };
    assert_eq!(
        scaled.detail(),
        "spec.replicas 3 -> 1 through the scale subresource: it runs --disable-ha"
    );
}

#[test]
fn a_warning_is_data_and_renders_as_before() {
    let w = Change::new(
        "deployment",
        "controller",
        What::Warning("left unchanged".into()),
        Cause::Policy("serving".into()),
    );
    assert!(w.is_warning());
    assert!(w.what.fields().is_empty());
    assert_eq!(
        w.to_string(),
        "deployment/controller: warning: left unchanged (policy serving)"
    );
    assert_eq!(
        serde_json::to_value(&w).unwrap(),
        serde_json::json!("deployment/controller: warning: left unchanged (policy serving)")
    );
}

#[test]
fn the_changes_that_are_not_a_value_name_their_field_and_action() {
    let shown = |what: What| Change::new("deployment", "d", what, Cause::Unstated).detail();
    assert_eq!(
        shown(What::ContainerArg {
            container: Some("controller".into()),
            arg: "--disable-ha",
            added: true
        }),
        "container controller args + --disable-ha"
    );
    assert_eq!(
        shown(What::ContainerArg {
            container: None,
            arg: "--disable-ha",
            added: false
        }),
        "container args - --disable-ha"
    );
    assert_eq!(
        shown(What::ArgKept {
            arg: "--disable-ha",
            present: false,
            record: "r"
        }),
        "--disable-ha absent as recorded; record r removed"
    );
    assert_eq!(
        shown(What::AntiAffinitySet {
            strength: "Preferred",
            downgraded: Some("not the policy's Required".into()),
            topology_key: "zone".into()
        }),
        "pod anti-affinity set to Preferred, not the policy's Required on zone"
    );
    assert_eq!(
        shown(What::AntiAffinityRemoved(TermOwner::Engine)),
        "pod anti-affinity: the engine's own term removed"
    );
    assert_eq!(
        shown(What::SpreadSet(vec![
            Spread {
                topology_key: "zone".into(),
                max_skew: 1,
                when_unsatisfiable: "DoNotSchedule",
                node_taints_policy: "Honor"
            };
            2
        ])),
        "topology spread set to zone (maxSkew 1, DoNotSchedule, nodeTaintsPolicy Honor, per ReplicaSet), zone (maxSkew 1, DoNotSchedule, nodeTaintsPolicy Honor, per ReplicaSet)"
    );
}
