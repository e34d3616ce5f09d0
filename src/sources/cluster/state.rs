//! The state of the cluster source: every object the watchers know (with
//! the last valid version of each policy object), merged into one
//! [`Snapshot`] after every batch of changes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use super::hpa_watches::{HpaWatches, Spawn};
use super::merge::{self, Merged, Origin, PolicyObject, Verdict};
use super::metrics::{SourceLabel, StateLabel};
use super::status::{self, ObservedStatus, ReadyStatus};
use super::writer::WriteReq;
use super::{Change, ClusterError, ClusterMetrics, Item, Msg, Observed, Source, configmaps};
use crate::sources::Governed;
use crate::store::{PolicyStore, Snapshot};

/// How often failed status writes are retried.
const RETRY_INTERVAL: Duration = Duration::from_secs(5);

/// A policy object plus what it currently carries in `status`.
#[derive(Clone, Debug)]
pub(crate) struct Tracked {
    pub object: PolicyObject,
    pub status: ObservedStatus,
}

/// Folds a newly observed version into the object's state: a valid version
/// replaces the last valid one; an invalid one keeps it.
pub(crate) fn fold(prev: Option<&Tracked>, obs: Observed) -> Tracked {
    let Observed {
        mut object,
        parsed,
        status,
    } = obs;
    match parsed {
        Ok(policy) => {
            object.last_valid = Some(Arc::new(policy));
            object.error = None;
        }
        Err(message) => {
            object.last_valid = prev.and_then(|p| p.object.last_valid.clone());
            object.error = Some(message);
        }
    }
    Tracked { object, status }
}

/// Objects of one source: `live` is what is known; `pending` buffers a
/// (re)list until it completes.
#[derive(Debug)]
struct SourceState<T> {
    live: BTreeMap<String, T>,
    pending: Option<BTreeMap<String, T>>,
    synced: bool,
}

impl<T> SourceState<T> {
    /// Applies one watcher change. `make` turns an item into the stored
    /// value, given the value already known under its key (the pending
    /// relist's first, then the live one); `None` ignores the item.
    fn apply(&mut self, change: Change, make: impl FnOnce(Option<&T>, Item) -> Option<T>) {
        match change {
            Change::Init => self.pending = Some(BTreeMap::new()),
            Change::InitApply(key, item) => {
                let prev = self
                    .pending
                    .as_ref()
                    .and_then(|p| p.get(&key))
                    .or_else(|| self.live.get(&key));
                if let Some(value) = make(prev, item) {
                    self.pending
                        .get_or_insert_with(BTreeMap::new)
                        .insert(key, value);
                }
            }
            Change::Apply(key, item) => {
                if let Some(value) = make(self.live.get(&key), item) {
                    self.live.insert(key, value);
                }
            }
            Change::InitDone => {
                self.live = self.pending.take().unwrap_or_default();
                self.synced = true;
            }
            Change::Delete(key) => {
                self.live.remove(&key);
            }
            Change::Missing => {
                self.live.clear();
                self.pending = None;
                self.synced = true;
            }
        }
    }
}

impl<T> Default for SourceState<T> {
    fn default() -> Self {
        SourceState {
            live: BTreeMap::new(),
            pending: None,
            synced: false,
        }
    }
}

#[derive(Debug)]
struct State {
    policies: SourceState<Tracked>,
    configmaps: SourceState<Tracked>,
    /// HPA watches of the namespaces with a policy in force.
    hpas: HpaWatches,
    /// `--governed-namespaces`.
    governed: Governed,
    /// Once synced, the source stays synced (a namespace whose HPA watch
    /// starts later must not fail readiness).
    was_synced: bool,
    merged: Merged,
    /// Status patches sent and not yet seen on the object, per uid.
    sent_status: HashMap<String, ReadyStatus>,
    /// Status writes that failed; retried on the next retry tick only (not
    /// at once, so an unreachable API server is not hammered).
    failed: std::collections::HashSet<String>,
    /// The last Event written per ConfigMap uid.
    sent_event: HashMap<String, ReadyStatus>,
    /// The last verdict logged per object.
    logged: HashMap<(Origin, String), Verdict>,
}

impl State {
    fn new(spawner: Box<dyn Spawn>, governed: Governed) -> State {
        State {
            policies: SourceState::default(),
            configmaps: SourceState::default(),
            hpas: HpaWatches::new(spawner),
            governed,
            was_synced: false,
            merged: Merged::default(),
            sent_status: HashMap::new(),
            failed: Default::default(),
            sent_event: HashMap::new(),
            logged: HashMap::new(),
        }
    }

    fn synced(&self) -> bool {
        self.was_synced || (self.policies.synced && self.configmaps.synced && self.hpas.synced())
    }

    /// A policy object's new state: folded into its last valid version.
    fn policy_item(prev: Option<&Tracked>, item: Item) -> Option<Tracked> {
        match item {
            Item::Policy(obs) => Some(fold(prev, *obs)),
            Item::Hpa(_) => None,
        }
    }

    /// Applies one message; true when the snapshot may have changed (an
    /// HPA event that changes no target is not).
    fn apply(&mut self, msg: Msg) -> bool {
        match msg {
            Msg::Watch(Source::Policies, change) => {
                self.policies.apply(change, Self::policy_item);
                true
            }
            Msg::Watch(Source::ConfigMaps, change) => {
                self.configmaps.apply(change, Self::policy_item);
                true
            }
            Msg::Watch(Source::Hpas, _) => false,
            Msg::Hpa {
                namespace,
                id,
                change,
            } => {
                let (targets, first_list) = self.hpas.apply(&namespace, id, change);
                // A first list matters before the first sync (it may
                // complete it), not after.
                targets || (first_list && !self.was_synced)
            }
            Msg::WriteFailed(uid) => {
                self.sent_status.remove(&uid);
                self.failed.insert(uid);
                false
            }
        }
    }

    /// Merges, publishes, updates metrics and logs changes.
    fn publish(&mut self, store: &PolicyStore, metrics: &ClusterMetrics) {
        let merged = merge::merge_governed(
            self.policies
                .live
                .values()
                .chain(self.configmaps.live.values())
                .map(|t| &t.object),
            &self.governed,
        );
        // HPAs matter only where a policy is in force: watch exactly there
        // (before the first sync too, so that synced includes their lists).
        if self.policies.synced && self.configmaps.synced {
            self.hpas.set(merged.policies.keys());
        }
        let synced = self.synced();
        self.was_synced = synced;
        let snapshot = Snapshot {
            policies: merged.policies.clone(),
            hpa_targets: self.hpas.targets().clone(),
            synced,
        };
        store.publish(snapshot);
        metrics.published.inc();
        metrics.synced.set(i64::from(synced));

        // Log which object governs which namespace when that changes.
        let namespaces: std::collections::BTreeSet<&String> = merged
            .winners
            .keys()
            .chain(self.merged.winners.keys())
            .collect();
        for ns in namespaces {
            let before = self.merged.winners.get(ns).map(|w| &w.1);
            let after = merged.winners.get(ns).map(|w| &w.1);
            let changed = before != after
                || self.merged.policies.get(ns).map(|p| &p.spec)
                    != merged.policies.get(ns).map(|p| &p.spec);
            if !changed {
                continue;
            }
            match after {
                Some(winner) => {
                    tracing::info!(namespace = %ns, policy = %winner, "policy in force")
                }
                None => tracing::info!(namespace = %ns, "no policy in force any more"),
            }
        }

        let mut by_origin: BTreeMap<Origin, i64> = BTreeMap::new();
        for (origin, _) in merged.winners.values() {
            *by_origin.entry(*origin).or_default() += 1;
        }
        for (origin, source) in [
            (Origin::Resource, Source::Policies),
            (Origin::ConfigMap, Source::ConfigMaps),
        ] {
            metrics
                .policies
                .get_or_create(&SourceLabel {
                    source: source.label().to_string(),
                })
                .set(by_origin.get(&origin).copied().unwrap_or(0));
        }
        let mut by_state: BTreeMap<&str, i64> = [
            ("valid", 0),
            ("invalid", 0),
            ("conflict", 0),
            ("not_governed", 0),
        ]
        .into();
        for v in merged.verdicts.values() {
            *by_state.entry(v.state()).or_default() += 1;
        }
        for (state, n) in by_state {
            metrics
                .policy_status
                .get_or_create(&StateLabel {
                    state: state.to_string(),
                })
                .set(n);
        }
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
            self.failed.clear();
        }
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
                match verdict {
                    Verdict::Valid { namespace } => {
                        tracing::info!(policy = %obj.display(), namespace = %namespace, "policy valid")
                    }
                    Verdict::Invalid { message, kept } => tracing::warn!(
                        policy = %obj.display(),
                        error = %message,
                        last_valid_kept = kept,
                        "policy invalid; not applied"
                    ),
                    Verdict::Conflict { namespace, winner } => tracing::warn!(
                        policy = %obj.display(),
                        namespace = %namespace,
                        winner = %winner,
                        "policy in conflict; not applied"
                    ),
                    Verdict::NotGoverned {
                        namespace,
                        governed,
                    } => tracing::warn!(
                        policy = %obj.display(),
                        namespace = %namespace,
                        governed_namespaces = %governed,
                        "policy for a namespace outside --governed-namespaces; not applied"
                    ),
                }
                self.logged.insert(key.clone(), verdict.clone());
            }
            let desired = status::desired(verdict, obj.origin, obj.generation);
            match obj.origin {
                Origin::Resource => {
                    if t.status.matches(&desired) {
                        self.sent_status.remove(&obj.uid);
                        self.failed.remove(&obj.uid);
                    } else if !self.failed.contains(&obj.uid)
                        && self.sent_status.get(&obj.uid) != Some(&desired)
                    {
                        self.sent_status.insert(obj.uid.clone(), desired.clone());
                        writes
                            .send(WriteReq::Status {
                                uid: obj.uid.clone(),
                                name: obj.name.clone(),
                                desired,
                                observed: t.status.clone(),
                            })
                            .map_err(|_| ClusterError::ChannelClosed("write"))?;
                    }
                }
                Origin::ConfigMap => {
                    if self.sent_event.get(&obj.uid) != Some(&desired) {
                        self.sent_event.insert(obj.uid.clone(), desired.clone());
                        writes
                            .send(WriteReq::Event {
                                reference: configmaps::reference(obj),
                                desired,
                            })
                            .map_err(|_| ClusterError::ChannelClosed("write"))?;
                    }
                }
            }
        }
        // Forget objects that are gone.
        let live = &self.merged.verdicts;
        self.logged.retain(|k, _| live.contains_key(k));
        self.sent_status
            .retain(|uid, _| live.contains_key(&(Origin::Resource, uid.clone())));
        self.failed
            .retain(|uid| live.contains_key(&(Origin::Resource, uid.clone())));
        self.sent_event
            .retain(|uid, _| live.contains_key(&(Origin::ConfigMap, uid.clone())));
        Ok(())
    }
}

pub(crate) async fn run(
    mut rx: UnboundedReceiver<Msg>,
    store: PolicyStore,
    writes: UnboundedSender<WriteReq>,
    metrics: ClusterMetrics,
    hpa_spawner: Box<dyn Spawn>,
    governed: Governed,
) -> Result<(), ClusterError> {
    let mut state = State::new(hpa_spawner, governed);
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
                        hpa_namespaces = state.hpas.namespaces().count(),
                        "cluster policy source synced"
                    );
                }
                state.report(&writes, false)?;
            }
            _ = retry.tick() => state.report(&writes, true)?,
        }
    }
}
