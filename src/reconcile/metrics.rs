//! Metrics of the reconciler.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::engine::Kind;

/// `kind` (one of the governed kinds) and `result` labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    pub kind: &'static str,
    /// `success`, `conflict` (the precondition failed; re-read and retried)
    /// or `error`.
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NamespaceLabel {
    /// A governed namespace (a policy's `spec.targetNamespace`; not
    /// `namespace`, which Prometheus sets to the scraped pod's).
    pub target_namespace: String,
}

/// A governed namespace and why its policy leaves objects alone.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeftAloneLabels {
    pub target_namespace: String,
    /// `opted-out`, `excluded` or `operator-owned`
    /// ([`crate::engine::standing::LeftAlone::label`]).
    pub reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RunLabel {
    /// `success` or `error`.
    pub result: &'static str,
}

/// The reconciler's metrics, each field registered under the name that
/// [`ReconcileMetrics::register`] gives it, with its meaning. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct ReconcileMetrics {
    pub writes: Family<WriteLabels, Counter>,
    /// In dry-run mode: every drifting object.
    pub drift: Family<KindLabel, Gauge>,
    pub runs: Family<RunLabel, Counter>,
    pub leader: Gauge,
    /// 0 once a pass goes through.
    pub forbidden: Family<NamespaceLabel, Gauge>,
    pub left_alone: Family<LeftAloneLabels, Gauge>,
    pub targets: Family<NamespaceLabel, Gauge>,
    /// Drift per (namespace, kind) from the last run of each namespace; the
    /// gauge is the sum over namespaces.
    per_namespace: Arc<Mutex<BTreeMap<(String, &'static str), i64>>>,
    /// The namespaces `forbidden`, `left_alone` and `targets` have lines for.
    namespace_labels: Arc<Mutex<BTreeSet<String>>>,
}

impl ReconcileMetrics {
    /// Creates the metrics and registers them under their full names.
    pub fn register(registry: &mut Registry) -> ReconcileMetrics {
        let m = ReconcileMetrics::default();
        registry.register(
            "knative_ha_webhook_reconcile_writes",
            "Patches the reconciler sent to bring governed objects in line, by kind and result (success, conflict, error)",
            m.writes.clone(),
        );
        registry.register(
            "knative_ha_webhook_reconcile_drift_objects",
            "Governed objects that differ from their policy after the last reconcile run, by kind",
            m.drift.clone(),
        );
        registry.register(
            "knative_ha_webhook_reconcile_runs",
            "Reconcile runs by result (success, error)",
            m.runs.clone(),
        );
        registry.register(
            "knative_ha_webhook_reconcile_leader",
            "1 while this replica holds the reconcile Lease",
            m.leader.clone(),
        );
        registry.register(
            "knative_ha_webhook_reconcile_forbidden",
            "1 while the API server refuses the reconciler a request (403 Forbidden) in a governed namespace, by target_namespace",
            m.forbidden.clone(),
        );
        registry.register(
            "knative_ha_webhook_reconcile_left_alone_objects",
            "Targets of a governed namespace's policy that it leaves unchanged (opted out, excluded, owned by the Knative Operator with governOperatorOwned false), by target_namespace and reason, from the last reconcile pass",
            m.left_alone.clone(),
        );
        registry.register(
            "knative_ha_webhook_reconcile_governed_objects",
            "Targets of a governed namespace's policy (governed and left alone), by target_namespace, from the last reconcile pass",
            m.targets.clone(),
        );
        m.publish(&BTreeMap::new());
        m
    }

    pub fn write(&self, kind: Kind, result: &'static str) {
        let kind = kind.as_str();
        self.writes
            .get_or_create(&WriteLabels { kind, result })
            .inc();
    }

    pub fn run(&self, ok: bool) {
        let result = if ok { "success" } else { "error" };
        self.runs.get_or_create(&RunLabel { result }).inc();
    }

    /// Records the drift left in `namespace` after a run.
    pub fn set_drift(&self, namespace: &str, counts: &BTreeMap<&'static str, i64>) {
        let mut map = lock(&self.per_namespace);
        for kind in crate::engine::kinds::listed().map(Kind::as_str) {
            let count = counts.get(kind).copied().unwrap_or(0);
            map.insert((namespace.to_string(), kind), count);
        }
        self.publish(&map);
    }

    /// Records whether the last pass over `namespace` met a 403 Forbidden.
    pub fn set_forbidden(&self, namespace: &str, refused: bool) {
        self.forbidden
            .get_or_create(&labelled(&self.namespace_labels, namespace))
            .set(i64::from(refused));
    }

    /// Records what the policy of `namespace` governs and leaves alone.
    pub fn set_left_alone(&self, namespace: &str, coverage: &crate::findings::Coverage) {
        let label = labelled(&self.namespace_labels, namespace);
        let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        for reason in crate::engine::standing::LeftAlone::LABELS {
            let left_alone = coverage
                .left_alone
                .iter()
                .filter(|u| u.why.label() == reason);
            self.left_alone
                .get_or_create(&LeftAloneLabels {
                    target_namespace: namespace.to_string(),
                    reason,
                })
                .set(count(left_alone.count()));
        }
        self.targets
            .get_or_create(&label)
            .set(count(coverage.targets));
    }

    /// Forgets namespaces that are no longer governed.
    pub fn retain_namespaces(&self, keep: &dyn Fn(&str) -> bool) {
        let mut map = lock(&self.per_namespace);
        map.retain(|(ns, _), _| keep(ns));
        self.publish(&map);
        self.retain_findings(keep);
    }

    /// Drops the `forbidden`, `left_alone` and `targets` lines of the
    /// namespaces `keep` refuses (all of them when this replica stops
    /// reconciling: it no longer knows).
    pub fn retain_findings(&self, keep: &dyn Fn(&str) -> bool) {
        lock(&self.namespace_labels).retain(|ns| {
            keep(ns) || {
                let label = NamespaceLabel {
                    target_namespace: ns.clone(),
                };
                self.forbidden.remove(&label);
                self.targets.remove(&label);
                for reason in crate::engine::standing::LeftAlone::LABELS {
                    self.left_alone.remove(&LeftAloneLabels {
                        target_namespace: ns.clone(),
                        reason,
                    });
                }
                false
            }
        });
    }

    /// Each kind's gauge: the sum over namespaces.
    fn publish(&self, map: &BTreeMap<(String, &'static str), i64>) {
        for kind in crate::engine::kinds::listed().map(Kind::as_str) {
            let total = map.iter().filter(|((_, k), _)| *k == kind).map(|(_, n)| n);
            self.drift
                .get_or_create(&KindLabel { kind })
                .set(total.sum());
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The label of `namespace`, remembered in `labelled` (for
/// [`ReconcileMetrics::retain_findings`]).
fn labelled(labelled: &Mutex<BTreeSet<String>>, namespace: &str) -> NamespaceLabel {
    lock(labelled).insert(namespace.to_string());
    NamespaceLabel {
        target_namespace: namespace.to_string(),
    }
}
