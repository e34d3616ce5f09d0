//! Policy from the cluster: HighAvailabilityPolicy resources and ConfigMaps
//! labelled `knativeha.dev/policy: "true"`, watched and cached in memory.
//!
//! Each source has one kube-runtime watcher (`watch`), its objects
//! validated by `policies` or `configmaps`; HPAs, PodDisruptionBudgets,
//! `config-leader-election` and PriorityClasses are watched only where a
//! policy is in force (`namespace_watches`). The `state` merges them by the
//! precedence rules (`merge`), publishes [`crate::engine::Snapshot`]s and
//! decides the `Ready` conditions (`status`, with the reconciler's
//! `verdict`) that the `writer` writes off the watch path.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::Api;
use kube::api::DynamicObject;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::watcher;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use crate::findings::Board;
use crate::policy::{Policy, PolicyError};
use crate::scope::AllowedNamespaces;
use crate::store::PolicyStore;
use namespace_watches::Update;

mod budget_watches;
pub mod configmaps;
pub mod hpas;
mod leader_election;
pub mod merge;
mod metrics;
mod namespace_watches;
mod observe;
pub mod policies;
mod priority_classes;
mod sent;
mod source_state;
mod state;
pub mod status;
pub mod verdict;
mod watch;
mod writer;

pub use metrics::{ClusterMetrics, SourceLabel, StateLabel};

/// Settings of the cluster source.
#[derive(Clone, Debug)]
pub struct ClusterSourceConfig {
    /// The webhook's own namespace: where policy ConfigMaps are read.
    pub namespace: String,
    /// `--governed-namespaces`: policies for other namespaces are refused
    /// (`Ready=False`, reason `NotGoverned`) and never in force.
    pub governed: AllowedNamespaces,
    /// The instance of the Event reporter (the pod's name).
    pub instance: Option<String>,
    /// What the reconciler of this process found it may do per namespace:
    /// a policy whose namespace refuses it is not `Ready`
    /// ([`verdict`]). A board nobody writes changes nothing.
    pub findings: Board,
}

impl ClusterSourceConfig {
    /// Every namespace governed.
    pub fn new(namespace: impl Into<String>) -> ClusterSourceConfig {
        ClusterSourceConfig {
            namespace: namespace.into(),
            governed: AllowedNamespaces::all(),
            instance: None,
            findings: Board::default(),
        }
    }
}

/// Errors of the cluster source (all of them end [`run`]).
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error("cluster source: the {0} watch stream ended unexpectedly")]
    StreamEnded(&'static str),
    #[error("cluster source: the internal {0} channel closed")]
    ChannelClosed(&'static str),
}

pub type Result<T, E = ClusterError> = std::result::Result<T, E>;

/// The watched sources (the last four only where a policy is in force:
/// [`namespace_watches`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum Source {
    Policies,
    ConfigMaps,
    Hpas,
    Budgets,
    PriorityClasses,
    LeaderElection,
}

impl Source {
    /// The `source` metric label and log field.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Source::Policies => "policies",
            Source::ConfigMaps => "configmaps",
            Source::Hpas => "hpas",
            Source::Budgets => "poddisruptionbudgets",
            Source::PriorityClasses => "priorityclasses",
            Source::LeaderElection => "config-leader-election",
        }
    }
}

/// One policy object, validated, as the watcher delivered it.
#[derive(Clone, Debug)]
pub struct Observed {
    /// The object (its `last_valid`/`error` are filled in by the state).
    pub object: merge::PolicyObject,
    /// This version, validated (errors name the field).
    pub parsed: Result<Policy, Invalid>,
    /// The status the object carries (HighAvailabilityPolicy only).
    pub status: status::ObservedStatus,
}

/// Why the current version of a policy object is not applied. Its text is
/// the message of the object's `Ready=False` condition; like
/// [`PolicyError`]'s, each message names the field it is about and holds
/// what is wrong there (a condition's message is one text, not a chain).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum Invalid {
    /// The HighAvailabilityPolicy breaks this release's rules.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// A policy ConfigMap whose document cannot be read (missing, or not
    /// YAML): the error names `data.policy.yaml`.
    #[error(transparent)]
    Unreadable(PolicyError),
    /// The document a policy ConfigMap holds breaks this release's rules.
    #[error("data.{key}: {0}", key = configmaps::DATA_KEY)]
    Document(PolicyError),
    /// The current version is invalid, and the last valid version recorded
    /// in the object's status (`generation`: its generation, when known)
    /// cannot be read back by this release either.
    #[error(
        "{current} (the last valid version recorded in status, generation {}, {}: {why})",
        .generation.map_or("unknown".to_string(), |g| g.to_string()),
        policies::NOT_APPLIED
    )]
    StatusRecord {
        current: Box<Invalid>,
        generation: Option<i64>,
        why: PolicyError,
    },
    /// The current version is invalid, and the last valid version recorded
    /// in the ConfigMap's annotation cannot be read back by this release
    /// either.
    #[error(
        "{current} (the last valid version recorded in annotation {} {}: {why})",
        configmaps::LAST_VALID_ANNOTATION,
        policies::NOT_APPLIED
    )]
    AnnotationRecord {
        current: Box<Invalid>,
        why: PolicyError,
    },
}

/// What a policy watcher tells the state: each object under its key.
#[derive(Debug)]
pub(crate) enum WatchEvent {
    /// A (re)list starts.
    Init,
    InitApply(String, Box<Observed>),
    /// The (re)list is complete: objects not listed are gone.
    InitDone,
    Apply(String, Box<Observed>),
    Delete(String),
    /// The resource does not exist (CRD not installed): no objects, synced.
    Missing,
}

impl WatchEvent {
    /// A policy watcher's event as the message for the state, its object
    /// observed under its key.
    fn msg<K>(
        source: Source,
        event: watcher::Event<K>,
        key: fn(&K) -> String,
        observe: fn(&K) -> Observed,
    ) -> Option<Msg> {
        let change = match event {
            watcher::Event::Init => WatchEvent::Init,
            watcher::Event::InitApply(o) => WatchEvent::InitApply(key(&o), Box::new(observe(&o))),
            watcher::Event::InitDone => WatchEvent::InitDone,
            watcher::Event::Apply(o) => WatchEvent::Apply(key(&o), Box::new(observe(&o))),
            watcher::Event::Delete(o) => WatchEvent::Delete(key(&o)),
        };
        Some(Msg::Watch(source, change))
    }
}

#[derive(Debug)]
pub(crate) enum Msg {
    /// A change of the policy objects (`Policies`, `ConfigMaps`).
    Watch(Source, WatchEvent),
    /// The HPA watcher `id` of `namespace` changed its targets or
    /// completed its first list ([`namespace_watches`]: it sends nothing
    /// else, like the watchers below).
    Hpa {
        namespace: String,
        id: u64,
        update: hpas::HpaUpdate,
    },
    /// The `config-leader-election` watcher's news.
    LeaderElection {
        namespace: String,
        id: u64,
        update: Update<Map<String, Value>>,
    },
    /// A PDB watcher's news.
    Budgets {
        namespace: String,
        id: u64,
        update: Update<BTreeMap<String, String>>,
    },
    /// The PriorityClass watcher's news.
    PriorityClasses {
        id: u64,
        update: Update<BTreeSet<String>>,
    },
    /// A status write for this HighAvailabilityPolicy uid failed: retry.
    WriteFailed(String),
}

/// Runs the cluster source until the returned future is dropped.
/// Publishes snapshots to `store`; `store.load().synced` becomes true after
/// the first full list of every source.
pub async fn run(
    client: kube::Client,
    config: ClusterSourceConfig,
    store: PolicyStore,
    metrics: ClusterMetrics,
) -> Result<()> {
    let resource = policies::api_resource();
    let crs: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &config.namespace);
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "knative-ha-webhook".into(),
            instance: config.instance.clone(),
        },
    );

    let (tx, rx) = mpsc::unbounded_channel();
    let (write_tx, write_rx) = mpsc::unbounded_channel();

    let spawners = state::Spawners {
        hpas: namespace_watches::spawner::<hpas::HpaRef>(&client, &tx, &metrics),
        budgets: namespace_watches::spawner::<PodDisruptionBudget>(&client, &tx, &metrics),
        priority_classes: namespace_watches::spawner::<PriorityClass>(&client, &tx, &metrics),
        leader_election: namespace_watches::spawner::<ConfigMap>(&client, &tx, &metrics),
    };
    let state = state::run(
        rx,
        store,
        write_tx,
        metrics.clone(),
        spawners,
        config.governed.clone(),
        config.findings.subscribe(),
    );
    let writer = writer::run(
        crs.clone(),
        cms.clone(),
        recorder,
        write_rx,
        tx.clone(),
        metrics.clone(),
    );
    let policies = watch_policies(crs, cms, &config.namespace, tx, metrics);
    tracing::info!(
        namespace = %config.namespace,
        governed_namespaces = %config.governed.display(),
        "cluster policy source starting"
    );
    tokio::select! {
        r = state => r,
        r = writer => r,
        r = policies => r,
    }
}

/// Watches the policy objects until one watcher ends: the
/// HighAvailabilityPolicies of the cluster and the labelled ConfigMaps of
/// `namespace`.
async fn watch_policies(
    crs: Api<DynamicObject>,
    cms: Api<ConfigMap>,
    namespace: &str,
    tx: mpsc::UnboundedSender<Msg>,
    metrics: ClusterMetrics,
) -> Result<()> {
    let watch_crs = watch::Watch {
        source: Source::Policies,
        scope: "cluster",
        api: crs,
        config: watcher::Config::default(),
        tx: tx.clone(),
        metrics: metrics.clone(),
        handle: |e| WatchEvent::msg(Source::Policies, e, policies::key, policies::observe),
    }
    .run();
    let watch_cms = watch::Watch {
        source: Source::ConfigMaps,
        scope: namespace,
        api: cms,
        config: watcher::Config::default().labels(configmaps::LABEL_SELECTOR),
        tx,
        metrics,
        handle: |e| WatchEvent::msg(Source::ConfigMaps, e, configmaps::key, configmaps::observe),
    }
    .run();
    tokio::select! {
        r = watch_crs => r,
        r = watch_cms => r,
    }
}
