//! How an audit report reaches the user: the table, and the exit code.

use crate::reconcile::audit::AuditReport;

/// The table: one row per change, then a summary line.
pub fn render_table(report: &AuditReport) -> String {
    let mut rows = vec![["NAMESPACE", "KIND", "NAME", "CHANGE"].map(String::from)];
    for d in &report.drift {
        for c in &d.changes {
            let mut text = c.change.detail();
            if c.rolls_pods {
                text.push_str(" (rolls pods)");
            }
            rows.push([
                d.namespace.clone(),
                d.kind.to_string(),
                d.name.clone(),
                text,
            ]);
        }
    }
    let mut out = String::new();
    for p in &report.policies {
        out.push_str(&format!(
            "namespace {}: policy {} ({})\n",
            p.namespace, p.policy, p.source
        ));
    }
    for w in &report.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    for o in &report.operator_overrides {
        out.push_str(&format!("overrides the Knative Operator: {o}\n"));
    }
    for l in &report.left_alone {
        out.push_str(&format!(
            "left alone: {} {}/{}: {}\n",
            l.kind, l.namespace, l.name, l.reason
        ));
    }
    for h in &report.held_back {
        out.push_str(&format!("not in line: {h}\n"));
    }
    for ns in &report.governs_nothing {
        out.push_str(&format!(
            "not in force: the policy of namespace {ns} changes nothing there: every object it targets is left alone\n"
        ));
    }
    let governed = report.objects.saturating_sub(report.left_alone.len());
    let alone = match report.left_alone.len() {
        0 => String::new(),
        n => format!(" ({n} left alone)"),
    };
    if report.drift.is_empty() {
        if report.governs_nothing.is_empty() && report.held_back.is_empty() {
            out.push_str(&format!(
                "in line: all {governed} governed objects match their policy{alone}\n"
            ));
        }
        return out;
    }
    // The last column is not padded.
    let widths = [0, 1, 2].map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0));
    for r in &rows {
        for (cell, width) in r.iter().zip(widths) {
            out.push_str(&format!("{cell:width$}  "));
        }
        out.push_str(&format!("{}\n", r[3]));
    }
    let rolling = report
        .drift
        .iter()
        .filter(|d| d.changes.iter().any(|c| c.rolls_pods))
        .count();
    out.push_str(&format!(
        "drift: {} of {governed} governed objects differ from their policy ({rolling} would roll pods){alone}\n",
        report.drift.len(),
    ));
    out
}

/// 0 in line, 1 drift (or a policy that changes nothing it targets).
pub fn exit_code(report: &AuditReport) -> u8 {
    if report.in_line { 0 } else { 1 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{Cause, Change, What};
    use crate::reconcile::audit::{ObjectDrift, PolicyRef};
    use crate::reconcile::plan::ChangeLine;

    fn report(drift: Vec<ObjectDrift>) -> AuditReport {
        AuditReport {
            in_line: drift.is_empty(),
            policies: vec![PolicyRef {
                namespace: "knative-serving".into(),
                policy: "serving".into(),
                source: "file".into(),
            }],
            objects: 3,
            drift,
            warnings: Vec::new(),
            ..AuditReport::default()
        }
    }

    #[test]
    fn a_held_back_priority_class_is_not_in_line() {
        let mut r = report(Vec::new());
        r.held_back = vec![
            "policy serving (knative-serving): spec.priorityClassName \"x\" is held back".into(),
        ];
        r.in_line = false;
        let out = render_table(&r);
        assert!(out.contains("not in line: policy serving"), "{out}");
        assert!(!out.contains("in line: all"), "{out}");
    }

    #[test]
    fn table_strips_the_prefix_and_marks_pod_template_changes() {
        let r = report(vec![ObjectDrift {
            kind: "Deployment",
            namespace: "knative-serving".into(),
            name: "controller".into(),
            changes: vec![
                ChangeLine {
                    change: Change::new(
                        "deployment",
                        "controller",
                        What::field("spec.replicas", "1", "3"),
                        Cause::Policy("serving".into()),
                    ),
                    rolls_pods: false,
                },
                ChangeLine {
                    change: Change::new(
                        "deployment",
                        "controller",
                        What::AntiAffinitySet {
                            strength: "Required",
                            downgraded: None,
                            topology_key: "kubernetes.io/hostname".into(),
                        },
                        Cause::Policy("serving".into()),
                    ),
                    rolls_pods: true,
                },
            ],
        }]);
        let t = render_table(&r);
        assert!(
            t.contains(
                "knative-serving  Deployment  controller  spec.replicas 1 -> 3 (policy serving)\n"
            ),
            "{t}"
        );
        assert!(t.contains("(policy serving) (rolls pods)\n"), "{t}");
        assert!(
            t.contains(
                "drift: 1 of 3 governed objects differ from their policy (1 would roll pods)"
            ),
            "{t}"
        );
        assert_eq!(exit_code(&r), 1);
    }

    #[test]
    fn in_line_report_says_so_and_exits_zero() {
        let r = report(Vec::new());
        let t = render_table(&r);
        assert!(
            t.contains("in line: all 3 governed objects match their policy"),
            "{t}"
        );
        assert!(!t.contains("NAMESPACE"), "{t}");
        assert_eq!(exit_code(&r), 0);
    }

    #[test]
    fn a_policy_that_leaves_every_target_alone_is_not_in_line() {
        let alone = |name: &str| {
            crate::reconcile::audit::ObjectLeftAlone {
            kind: "Deployment",
            namespace: "knative-serving".into(),
            name: name.into(),
            reason: "owned by the Knative Operator's KnativeServing/ks (the policy sets spec.governOperatorOwned: false)".into(),
        }
        };
        let mut r = report(Vec::new());
        r.left_alone = vec![alone("controller")];
        let t = render_table(&r);
        assert!(
            t.contains("left alone: Deployment knative-serving/controller: owned by the Knative Operator's KnativeServing/ks"),
            "{t}"
        );
        assert!(
            t.contains("in line: all 2 governed objects match their policy (1 left alone)"),
            "{t}"
        );
        r.left_alone = vec![alone("a"), alone("b"), alone("c")];
        r.governs_nothing = vec!["knative-serving".into()];
        r.in_line = false;
        let t = render_table(&r);
        assert!(!t.contains("in line"), "{t}");
        assert!(
            t.contains(
                "not in force: the policy of namespace knative-serving changes nothing there"
            ),
            "{t}"
        );
        assert_eq!(exit_code(&r), 1);
    }
}
