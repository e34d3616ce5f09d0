//! Metrics of the cluster source.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// `source` label: the watched source (`policies` for the
/// HighAvailabilityPolicy resources, `configmaps`, `hpas`, ...).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabel {
    pub source: &'static str,
}

/// `state` label: a policy object's verdict (`valid`, `invalid`,
/// `conflict`, `not_governed`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: &'static str,
}

/// The cluster source's metrics, registered once at start-up: each field is
/// `knative_ha_webhook_` and its name or the name its doc gives (help texts
/// in [`ClusterMetrics::register`]).
#[derive(Clone, Debug, Default)]
pub struct ClusterMetrics {
    pub watch_errors: Family<SourceLabel, Counter>,
    pub source_up: Family<SourceLabel, Gauge>,
    pub policies: Family<SourceLabel, Gauge>,
    pub policy_status: Family<StateLabel, Gauge>,
    /// `policies_on_last_valid`.
    pub on_last_valid: Family<SourceLabel, Gauge>,
    /// `policies_on_refused_last_valid` (Ready reason
    /// `LastValidRefusedByThisRelease`).
    pub on_refused_last_valid: Family<SourceLabel, Gauge>,
    /// `cluster_synced`.
    pub synced: Gauge,
    /// `status_write_errors`: failed status patches and event writes.
    pub write_errors: Counter,
    /// `cluster_snapshots_published`: an HPA event that changes no
    /// `scaleTargetRef` publishes none, nor a policy event that changes
    /// no policy in force, such as a status or annotation write.
    pub published: Counter,
}

impl ClusterMetrics {
    /// Creates the metrics and registers them in `registry` (full names,
    /// with the `knative_ha_webhook_` prefix).
    pub fn register(registry: &mut Registry) -> ClusterMetrics {
        let m = ClusterMetrics::default();
        registry.register(
            "knative_ha_webhook_watch_errors",
            "Errors of the cluster source's watch streams (each is retried with backoff)",
            m.watch_errors.clone(),
        );
        registry.register(
            "knative_ha_webhook_source_up",
            "1 while the cluster source's watch of this source works, 0 after an error until it recovers",
            m.source_up.clone(),
        );
        registry.register(
            "knative_ha_webhook_policies",
            "Policies in force, by source",
            m.policies.clone(),
        );
        registry.register(
            "knative_ha_webhook_policy_status",
            "Policy objects in the cluster, by state (valid, invalid, conflict)",
            m.policy_status.clone(),
        );
        registry.register(
            "knative_ha_webhook_policies_on_last_valid",
            "Policies in force on their last valid version (the object itself is invalid now), by source",
            m.on_last_valid.clone(),
        );
        registry.register(
            "knative_ha_webhook_policies_on_refused_last_valid",
            "Policies in force on a last valid version this release refuses in part (applied without the refused settings; fix the policy), by source",
            m.on_refused_last_valid.clone(),
        );
        registry.register(
            "knative_ha_webhook_cluster_synced",
            "1 once the first full list of every cluster source has completed",
            m.synced.clone(),
        );
        registry.register(
            "knative_ha_webhook_status_write_errors",
            "Failed writes of policy status conditions and ConfigMap events",
            m.write_errors.clone(),
        );
        registry.register(
            "knative_ha_webhook_cluster_snapshots_published",
            "Policy snapshots published by the cluster source (policy changes and HPA target changes)",
            m.published.clone(),
        );
        m
    }

    pub(crate) fn set_up(&self, source: &'static str, up: bool) {
        self.source_up
            .get_or_create(&SourceLabel { source })
            .set(i64::from(up));
    }

    pub(crate) fn watch_error(&self, source: &'static str) {
        self.watch_errors
            .get_or_create(&SourceLabel { source })
            .inc();
    }
}
