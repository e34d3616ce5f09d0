//! Policy from the cluster: HighAvailabilityPolicy resources and ConfigMaps
//! labelled `knativeha.dev/policy: "true"`, watched and cached in memory.

use prometheus_client::registry::Registry;

use crate::store::PolicyStore;

/// Settings of the cluster source.
#[derive(Clone, Debug)]
pub struct ClusterSourceConfig {
    /// The webhook's own namespace: where policy ConfigMaps are read.
    pub namespace: String,
}

/// The cluster source's metrics, registered once at start-up.
#[derive(Clone, Debug, Default)]
pub struct ClusterMetrics {}

impl ClusterMetrics {
    /// Creates the metrics and registers them in `registry`.
    pub fn register(registry: &mut Registry) -> ClusterMetrics {
        let _ = registry;
        ClusterMetrics {}
    }
}

/// Runs the cluster source until the returned future is dropped.
/// Publishes snapshots to `store`; `store.load().synced` becomes true after
/// the first full list of every source.
pub async fn run(
    client: kube::Client,
    config: ClusterSourceConfig,
    store: PolicyStore,
    metrics: ClusterMetrics,
) -> anyhow::Result<()> {
    let _ = (client, config, store, metrics);
    anyhow::bail!("cluster policy source: not implemented yet")
}
