//! The state of the cluster source: every object the watchers know (with
//! the last valid version of each policy object), merged into one
//! [`Snapshot`] after every batch of changes.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::sync::watch;

use super::hpas::{self, HpaWatches};
use super::merge::{self, Merged, Origin, Verdict};
use super::namespace_watches::{NamespaceWatches, Spawn};
use super::observe::{count_policies, log_verdict, log_winners};
use super::priority_classes::CLUSTER;
use super::sent::Sent;
use super::source_state::{SourceState, Tracked};
use super::status;
use super::writer::WriteReq;
use super::{ClusterError, ClusterMetrics, Msg, Source};
use crate::engine::{Snapshot, Unclaimed};
use crate::findings::Findings;
use crate::scope::AllowedNamespaces;
use crate::store::PolicyStore;

/// How often failed status writes are retried.
const RETRY_INTERVAL: Duration = Duration::from_secs(5);

struct State {
    policies: SourceState,
    configmaps: SourceState,
    /// HPA watches of the namespaces with a policy in force.
    hpas: HpaWatches,
    /// `config-leader-election` watches of the same namespaces: its
    /// duration keys (absent when it has none, or is not there).
    leader_election: NamespaceWatches<Map<String, Value>>,
    /// PodDisruptionBudget watches of the same namespaces: PDB name -> what
    /// a change of counts (its selector and budget fields), for the PDBs
    /// the reconciler did not create (not waited for: readiness never
    /// hangs on them).
    budgets: NamespaceWatches<BTreeMap<String, String>>,
    /// The PriorityClasses' names (one watch, its scope key [`CLUSTER`]),
    /// while a policy in force names one (not waited for either: until
    /// listed, the engine writes the name unchecked).
    priority_classes: NamespaceWatches<BTreeSet<String>>,
    /// `--governed-namespaces`.
    governed: AllowedNamespaces,
    /// Once synced, the source stays synced (a namespace whose HPA watch
    /// starts later must not fail readiness).
    was_synced: bool,
    /// A snapshot was published (the first one always is).
    published_once: bool,
    merged: Merged,
    /// The status patches and Events asked of the writer.
    sent: Sent,
    /// The last verdict logged per object.
    logged: HashMap<(Origin, String), Verdict>,
    /// What the reconciler found it may do per namespace
    /// ([`crate::findings`]; empty where this replica does not reconcile).
    findings: watch::Receiver<Findings>,
}

/// How the per-namespace watchers are started.
pub(crate) struct Spawners {
    pub hpas: Box<dyn Spawn>,
    pub leader_election: Box<dyn Spawn>,
    pub budgets: Box<dyn Spawn>,
    pub priority_classes: Box<dyn Spawn>,
}

impl State {
    fn new(
        spawners: Spawners,
        governed: AllowedNamespaces,
        findings: watch::Receiver<Findings>,
    ) -> State {
        State {
            policies: SourceState::default(),
            configmaps: SourceState::default(),
            hpas: HpaWatches::new(hpas::WHAT, spawners.hpas),
            leader_election: NamespaceWatches::new(
                "ConfigMap config-leader-election",
                spawners.leader_election,
            ),
            budgets: NamespaceWatches::new("PodDisruptionBudgets", spawners.budgets),
            priority_classes: NamespaceWatches::new("PriorityClasses", spawners.priority_classes),
            governed,
            was_synced: false,
            published_once: false,
            merged: Merged::default(),
            sent: Sent::default(),
            logged: HashMap::new(),
            findings,
        }
    }

    /// Every policy object known.
    fn tracked(&self) -> impl Iterator<Item = &Tracked> {
        self.policies
            .live
            .values()
            .chain(self.configmaps.live.values())
    }

    /// The namespaces no policy object names ([`Unclaimed`]): every object's
    /// current target and its last valid version's; not known at all while
    /// some object names none that can be read.
    fn unclaimed(&self) -> Unclaimed {
        let mut claimed = BTreeSet::new();
        for obj in self.tracked().map(|t| &t.object) {
            let Some(target) = &obj.target else {
                return Unclaimed::Unknown;
            };
            claimed.insert(target.clone());
            if let Some(p) = &obj.last_valid {
                claimed.insert(p.spec.target_namespace.clone());
            }
        }
        Unclaimed::all_but(claimed).within(&self.governed)
    }

    fn synced(&self) -> bool {
        self.was_synced
            || (self.policies.synced
                && self.configmaps.synced
                && self.hpas.synced()
                && self.leader_election.synced())
    }

    /// Applies one message; true when the snapshot may have changed (an
    /// HPA event that changes no target never reaches the state).
    fn apply(&mut self, msg: Msg) -> bool {
        match msg {
            Msg::Watch(Source::Policies, change) => {
                self.policies.apply(change);
                true
            }
            Msg::Watch(Source::ConfigMaps, change) => {
                self.configmaps.apply(change);
                true
            }
            Msg::Watch(..) => false,
            Msg::Hpa {
                namespace,
                id,
                update,
            } => news(self.was_synced, self.hpas.apply(&namespace, id, update)),
            Msg::LeaderElection {
                namespace,
                id,
                update,
            } => news(
                self.was_synced,
                self.leader_election.apply(&namespace, id, update),
            ),
            Msg::Budgets {
                namespace,
                id,
                update,
            } => self.budgets.apply(&namespace, id, update).0,
            Msg::PriorityClasses { id, update } => {
                let first_list = update.first_list;
                let (changed, _) = self.priority_classes.apply(CLUSTER, id, update);
                changed || first_list
            }
            Msg::WriteFailed(uid) => {
                self.sent.status.remove(&uid);
                self.sent.annotation.remove(&uid);
                self.sent.failed.insert(uid);
                false
            }
        }
    }

    /// Merges, publishes, updates metrics and logs changes.
    fn publish(&mut self, store: &PolicyStore, metrics: &ClusterMetrics) {
        let merged = merge::merge_governed(self.tracked().map(|t| &t.object), &self.governed);
        // HPAs and config-leader-election matter only where a policy is in
        // force: watch exactly there (before the first sync too, so that
        // synced includes their lists).
        if self.policies.synced && self.configmaps.synced {
            self.hpas.set(merged.policies.keys());
            self.leader_election.set(merged.policies.keys());
            self.budgets.set(merged.policies.keys());
            // PriorityClasses: watched while a policy in force names one.
            let cluster = CLUSTER.to_string();
            let mut named = merged.policies.values();
            let named = named.any(|p| p.spec.priority_classes().next().is_some());
            self.priority_classes.set(named.then_some(&cluster));
        }
        // The PriorityClasses that exist, once listed (None: not known, or not watched).
        let classes = &self.priority_classes;
        let priority_classes = classes
            .synced_in(CLUSTER)
            .then(|| classes.values().get(CLUSTER).cloned().unwrap_or_default());
        let synced = self.synced();
        self.was_synced = synced;
        // A change the request path cannot see (a status write, the
        // last-valid annotation, a conflict's loser) publishes nothing.
        let current = store.load();
        let unclaimed = self.unclaimed();
        let same = self.published_once
            && current.synced == synced
            && current.policies == merged.policies
            && &current.hpa_targets == self.hpas.values()
            && &current.leader_election == self.leader_election.values()
            && &current.budgets == self.budgets.values()
            && current.priority_classes == priority_classes
            && current.unclaimed == unclaimed;
        if !same {
            store.publish(Snapshot {
                policies: merged.policies.clone(),
                hpa_targets: self.hpas.values().clone(),
                leader_election: self.leader_election.values().clone(),
                budgets: self.budgets.values().clone(),
                priority_classes,
                synced,
                unclaimed,
            });
            metrics.published.inc();
            self.published_once = true;
        }
        metrics.synced.set(i64::from(synced));

        log_winners(&self.merged, &merged);
        count_policies(metrics, &merged);
        self.merged = merged;
    }

    /// Logs verdict changes and asks the writer for the status patches and
    /// Events that differ from what the objects already say. Only after the
    /// first full sync, so that verdicts are final.
    fn report(
        &mut self,
        writes: &UnboundedSender<WriteReq>,
        retry: bool,
    ) -> Result<(), ClusterError> {
        if !self.synced() {
            return Ok(());
        }
        if retry {
            self.sent.failed.clear();
        }
        let found = self.findings.borrow_and_update().clone();
        for t in self
            .policies
            .live
            .values()
            .chain(self.configmaps.live.values())
        {
            let obj = &t.object;
            let key = (obj.origin, obj.uid.clone());
            let Some(verdict) = self.merged.verdicts.get(&key) else {
                continue;
            };
            if self.logged.get(&key) != Some(verdict) {
                log_verdict(obj, verdict);
                self.logged.insert(key.clone(), verdict.clone());
            }
            let desired = status::desired(verdict, obj.origin, obj.generation);
            let mut desired = super::verdict::with_findings(desired, verdict, &found, &t.status);
            desired.record = status::record(obj);
            let write = match obj.origin {
                Origin::Resource => [self.sent.status_write(t, desired), None],
                Origin::ConfigMap => {
                    let record = desired.record.take();
                    // A ConfigMap has no status: its Event says the verdict,
                    // and a new count of its targets is no news.
                    desired.coverage = None;
                    [
                        self.sent.annotation_write(t, record),
                        self.sent.event_write(obj, desired),
                    ]
                }
            };
            for req in write.into_iter().flatten() {
                writes
                    .send(req)
                    .map_err(|_| ClusterError::ChannelClosed("write"))?;
            }
        }
        let live = &self.merged.verdicts;
        self.logged.retain(|k, _| live.contains_key(k));
        self.sent.forget_gone(live);
        Ok(())
    }
}

/// Whether a per-namespace watcher's update may change the snapshot: its
/// values changed, or its first list came before the first sync (it may
/// complete it; after it, it does not matter).
fn news(was_synced: bool, (changed, first_list): (bool, bool)) -> bool {
    changed || (first_list && !was_synced)
}

pub(crate) async fn run(
    mut rx: UnboundedReceiver<Msg>,
    store: PolicyStore,
    writes: UnboundedSender<WriteReq>,
    metrics: ClusterMetrics,
    spawners: Spawners,
    governed: AllowedNamespaces,
    findings: watch::Receiver<Findings>,
) -> Result<(), ClusterError> {
    let mut findings_changed = findings.clone();
    let mut state = State::new(spawners, governed, findings);
    let mut retry = tokio::time::interval(RETRY_INTERVAL);
    retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut logged_synced = false;
    loop {
        tokio::select! {
            msg = rx.recv() => {
                let Some(msg) = msg else {
                    return Err(ClusterError::ChannelClosed("watch"));
                };
                let mut dirty = state.apply(msg);
                // Apply everything already queued before publishing once.
                while let Ok(msg) = rx.try_recv() {
                    dirty |= state.apply(msg);
                }
                if !dirty {
                    continue;
                }
                state.publish(&store, &metrics);
                if state.synced() && !logged_synced {
                    logged_synced = true;
                    tracing::info!(
                        policies = state.merged.policies.len(),
                        hpa_namespaces = state.merged.policies.len(),
                        "cluster policy source synced"
                    );
                }
                state.report(&writes, false)?;
            }
            _ = retry.tick() => state.report(&writes, true)?,
            // What the reconciler found changed: the Ready conditions it
            // decides ([`verdict`]). Never ends (the board outlives it).
            Ok(()) = findings_changed.changed() => state.report(&writes, false)?,
        }
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
