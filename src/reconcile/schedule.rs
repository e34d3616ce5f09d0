//! When the leader reconciles which namespaces (docs/reconcile.md, "When"):
//! all of them on a full run, else those whose `Against` changed since
//! they were last reconciled, and those once more [`SETTLE`] later.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::time::Instant;

use crate::engine::Snapshot;
use crate::policy::Policy;

/// After a run for a change: when the changed namespaces are run once more.
pub const SETTLE: Duration = Duration::from_secs(10);

/// After a failed run: when to try again (instead of the full interval).
pub const RETRY_AFTER_ERROR: Duration = Duration::from_secs(30);

/// What each namespace was (or would be) reconciled against.
pub(super) type Seen = BTreeMap<String, Against>;

/// What one namespace was reconciled against: its policy, HPA targets,
/// `config-leader-election` duration keys, and the budgets the reconciler
/// did not create (a release's budget over a created one's pods must not
/// wait for the next full run).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Against {
    pub policy: Arc<Policy>,
    pub hpa_targets: BTreeSet<String>,
    pub leader_election: Option<Map<String, Value>>,
    pub budgets: Option<BTreeMap<String, String>>,
    /// The PriorityClasses that exist (the same for every namespace): one
    /// created after a policy named it lets the held-back name be written.
    pub priority_classes: Option<BTreeSet<String>>,
}

/// What each namespace of `snapshot` would be reconciled against.
pub(super) fn seen(snapshot: &Snapshot) -> Seen {
    snapshot
        .policies
        .iter()
        .map(|(ns, p)| {
            (
                ns.clone(),
                Against {
                    policy: p.clone(),
                    hpa_targets: snapshot.hpa_targets.get(ns).cloned().unwrap_or_default(),
                    leader_election: snapshot.leader_election.get(ns).cloned(),
                    budgets: snapshot.budgets.get(ns).cloned(),
                    priority_classes: snapshot.priority_classes.clone(),
                },
            )
        })
        .collect()
}

/// Namespaces of `now` whose [`Against`] differs from `before`'s.
fn changed(before: &Seen, now: &Seen) -> BTreeSet<String> {
    now.iter()
        .filter(|(ns, against)| before.get(*ns) != Some(*against))
        .map(|(ns, _)| ns.clone())
        .collect()
}

/// The namespaces a run is due for.
pub(super) struct Due {
    pub namespaces: BTreeSet<String>,
    /// Every governed namespace (not only the changed ones).
    pub full: bool,
    /// Of `namespaces`, those due for a change (not to settle).
    pub changed: BTreeSet<String>,
}

/// The leader's memory between runs.
pub(super) struct Schedule {
    interval: Duration,
    /// What the last run was against; `None` before the first run.
    last: Option<Seen>,
    next_full: Instant,
    /// Namespaces run for a change, and when they are run once more.
    settle: Option<(Instant, BTreeSet<String>)>,
    /// [`SETTLE`] outside tests.
    settle_after: Duration,
}

impl Schedule {
    pub fn new(interval: Duration, settle_after: Duration) -> Schedule {
        Schedule {
            interval,
            last: None,
            next_full: Instant::now(),
            settle: None,
            settle_after,
        }
    }

    /// Leadership changed: the next run is a full run.
    pub fn restart(&mut self) {
        self.last = None;
    }

    /// The namespaces of `now` a run is due for now (maybe none).
    pub fn due(&self, now: &Seen) -> Due {
        let at = Instant::now();
        let full = self.last.is_none() || at >= self.next_full;
        let Some(before) = self.last.as_ref().filter(|_| !full) else {
            let namespaces: BTreeSet<String> = now.keys().cloned().collect();
            return Due {
                changed: namespaces.clone(),
                namespaces,
                full,
            };
        };
        let changed = changed(before, now);
        let mut namespaces = changed.clone();
        if let Some((when, settling)) = &self.settle
            && at >= *when
        {
            namespaces.extend(settling.iter().filter(|ns| now.contains_key(*ns)).cloned());
        }
        Due {
            namespaces,
            full,
            changed,
        }
    }

    /// A run (or a due that found nothing to do) is over: `now` is what it
    /// was against; a failed run brings the next full run closer; the
    /// namespaces run for a change are run once more [`SETTLE`] later.
    pub fn done(&mut self, now: Seen, due: &Due, ok: bool) {
        let full = due.full;
        self.last = Some(now);
        let at = Instant::now();
        // Pending and not yet run: kept (with more changes, 10 s after the
        // last of them); run, or made moot by a full run: gone.
        let mut pending = self.settle.take().filter(|(when, _)| *when > at && !full);
        if !full && !due.changed.is_empty() {
            let mut namespaces = pending.map(|(_, n)| n).unwrap_or_default();
            namespaces.extend(due.changed.iter().cloned());
            pending = Some((at + self.settle_after, namespaces));
        }
        self.settle = pending;
        if full {
            self.next_full = at + self.interval;
        }
        if !ok {
            self.next_full = self.next_full.min(at + RETRY_AFTER_ERROR);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(ns: &str, replicas: i32) -> Arc<Policy> {
        Arc::new(Policy {
            name: "p".into(),
            spec: crate::policy::HighAvailabilityPolicySpec {
                target_namespace: ns.into(),
                replicas: Some(replicas),
                ..Default::default()
            },
        })
    }

    fn against(
        policy: Arc<Policy>,
        hpa_targets: BTreeSet<String>,
        leader_election: Option<Map<String, Value>>,
    ) -> Against {
        Against {
            policy,
            hpa_targets,
            leader_election,
            budgets: None,
            priority_classes: None,
        }
    }

    #[test]
    fn changed_namespaces() {
        let before: Seen = [
            (
                "a".to_string(),
                against(policy("a", 3), BTreeSet::new(), None),
            ),
            (
                "b".to_string(),
                against(policy("b", 3), BTreeSet::new(), None),
            ),
            (
                "c".to_string(),
                against(policy("c", 3), BTreeSet::new(), None),
            ),
            (
                "e".to_string(),
                against(policy("e", 3), BTreeSet::new(), None),
            ),
        ]
        .into();
        let mut now = before.clone();
        let retry = Map::from_iter([("retryPeriod".to_string(), Value::from("30s"))]);
        now.insert(
            "e".into(),
            against(policy("e", 3), BTreeSet::new(), Some(retry)),
        );
        now.insert("a".into(), against(policy("a", 4), BTreeSet::new(), None));
        now.insert(
            "b".into(),
            against(policy("b", 3), ["x".to_string()].into(), None),
        );
        now.insert("d".into(), against(policy("d", 3), BTreeSet::new(), None));
        now.remove("c");
        let mut budgets = against(policy("c", 3), BTreeSet::new(), None);
        budgets.budgets = Some([("autoscaler".to_string(), "{}".to_string())].into());
        now.insert("f".into(), budgets.clone());
        let mut before = before;
        before.insert("f".into(), against(policy("c", 3), BTreeSet::new(), None));
        let got: Vec<String> = changed(&before, &now).into_iter().collect();
        assert_eq!(got, vec!["a", "b", "d", "e", "f"], "f: a release's budget");
        assert!(changed(&now, &now).is_empty());
    }

    fn full(now: &Seen) -> Due {
        let namespaces: BTreeSet<String> = now.keys().cloned().collect();
        Due {
            changed: namespaces.clone(),
            namespaces,
            full: true,
        }
    }

    #[test]
    fn a_change_is_run_once_more_after_it_settles() {
        let a: Seen = [(
            "a".to_string(),
            against(policy("a", 3), BTreeSet::new(), None),
        )]
        .into();
        let mut b = a.clone();
        b.insert(
            "a".into(),
            against(policy("a", 3), ["activator".to_string()].into(), None),
        );
        let mut s = Schedule::new(Duration::from_secs(3600), SETTLE);
        s.done(a.clone(), &full(&a), true);
        assert!(s.settle.is_none(), "a full run settles nothing");
        let due = s.due(&b);
        assert_eq!(due.changed, BTreeSet::from(["a".to_string()]));
        s.done(b.clone(), &due, true);
        // Not before SETTLE, whatever the polls in between.
        let due = s.due(&b);
        assert!(due.namespaces.is_empty());
        s.done(b.clone(), &due, true);
        let (when, _) = s.settle.clone().expect("pending");
        assert!(when > Instant::now() + SETTLE - Duration::from_secs(1));
        // Once due: run once, then nothing more.
        s.settle_after = Duration::ZERO;
        s.settle = Some((Instant::now(), BTreeSet::from(["a".to_string()])));
        let due = s.due(&b);
        assert_eq!(due.namespaces, BTreeSet::from(["a".to_string()]));
        assert!(due.changed.is_empty() && !due.full);
        s.done(b.clone(), &due, true);
        assert!(s.settle.is_none());
        assert!(s.due(&b).namespaces.is_empty());
    }

    #[test]
    fn full_first_then_changed_then_full_after_restart_or_interval() {
        let a: Seen = [(
            "a".to_string(),
            against(policy("a", 3), BTreeSet::new(), None),
        )]
        .into();
        let mut ab = a.clone();
        ab.insert("b".into(), against(policy("b", 3), BTreeSet::new(), None));
        let names = |d: &Due| d.namespaces.iter().cloned().collect::<Vec<_>>();

        let mut s = Schedule::new(Duration::from_secs(3600), SETTLE);
        let due = s.due(&a);
        assert!(due.full);
        assert_eq!(names(&due), vec!["a"]);
        s.done(a.clone(), &due, true);
        let due = s.due(&a);
        assert!(!due.full && due.namespaces.is_empty());
        let due = s.due(&ab);
        assert!(!due.full);
        assert_eq!(names(&due), vec!["b"]);
        s.done(ab.clone(), &due, true);

        s.restart();
        let due = s.due(&ab);
        assert!(due.full);
        assert_eq!(names(&due), vec!["a", "b"]);

        // A failed run: the next full run within RETRY_AFTER_ERROR.
        s.done(ab.clone(), &full(&ab), false);
        assert!(s.next_full <= Instant::now() + RETRY_AFTER_ERROR);
        assert!(!s.due(&ab).full);

        // Interval elapsed: full again.
        let mut s = Schedule::new(Duration::ZERO, SETTLE);
        s.done(a.clone(), &full(&a), true);
        assert!(s.due(&a).full);
    }
}
