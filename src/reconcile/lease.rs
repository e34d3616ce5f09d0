//! Leader election with a coordination.k8s.io/v1 Lease, written with
//! optimistic concurrency (the resourceVersion of the Lease that was read
//! goes into every replace, so two replicas never both win a round).
//!
//! Expiry is judged like client-go does: by how long this replica has seen
//! the same record (holder and renewTime) unchanged, on its own monotonic
//! clock, so clock skew between nodes does not matter.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::PostParams;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::watch;
use tokio::time::Instant;

use super::error::is_conflict;

/// The Lease's name.
pub const LEASE_NAME: &str = "knative-ha-webhook-reconcile";

/// Settings of the election.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// `holderIdentity`: the pod name (see [`crate::config::identity`]).
    pub identity: String,
    /// `leaseDurationSeconds`: how long a record stays valid unrenewed.
    pub duration: Duration,
    /// How often the holder renews (and others retry).
    pub renew_every: Duration,
}

/// Why an election step failed.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("lease {namespace}/{name}: {action}")]
    Api {
        namespace: String,
        name: String,
        action: &'static str,
        #[source]
        source: kube::Error,
    },
    /// A round got no answer before the renew deadline: the last renewal
    /// is no longer valid to act on (client-go's `RenewDeadline`).
    #[error("lease {namespace}/{name}: no answer within the renew deadline ({deadline:?})")]
    Deadline {
        namespace: String,
        name: String,
        deadline: Duration,
    },
}

/// The result of an election step.
pub type Result<T, E = LeaseError> = std::result::Result<T, E>;

/// The outcome of one election round.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Round {
    /// This replica holds the Lease (acquired or renewed).
    Leader,
    /// Someone else holds a valid Lease.
    Follower { holder: String },
}

/// What identifies one version of the Lease record: (holder, renewTime).
type Record = (Option<String>, Option<String>);

fn record(spec: &LeaseSpec) -> Record {
    let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
    (holder, spec.renew_time.as_ref().map(|t| t.0.to_string()))
}

/// One replica's view of the Lease.
pub struct Elector {
    api: Api<Lease>,
    config: LeaseConfig,
    /// The record last seen, and when it was first seen.
    observed: Option<(Record, Instant)>,
    /// When this replica last renewed successfully.
    last_renew: Option<Instant>,
}

impl Elector {
    pub fn new(client: kube::Client, config: LeaseConfig) -> Elector {
        Elector {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
            last_renew: None,
        }
    }

    fn err(&self, action: &'static str, e: kube::Error) -> LeaseError {
        LeaseError::Api {
            namespace: self.config.namespace.clone(),
            name: self.config.name.clone(),
            action,
            source: e,
        }
    }

    fn mine(&self, spec: &LeaseSpec) -> bool {
        spec.holder_identity.as_ref() == Some(&self.config.identity)
    }

    /// The record this replica writes over `previous` (a takeover counts
    /// a transition).
    fn spec_for_me(&self, previous: Option<&LeaseSpec>) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        let (acquire_time, transitions) = match previous {
            Some(s) if self.mine(s) => (s.acquire_time.clone(), s.lease_transitions.unwrap_or(0)),
            Some(s) => (Some(now.clone()), s.lease_transitions.unwrap_or(0) + 1),
            None => (Some(now.clone()), 0),
        };
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(self.config.duration.as_secs().max(1) as i32),
            acquire_time,
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    /// How long a renewal stays valid to act on: `leaseDurationSeconds`
    /// less the renew interval, as client-go's `RenewDeadline` sits below
    /// its `LeaseDuration`.
    fn renew_deadline(&self) -> Duration {
        self.config.duration.saturating_sub(self.config.renew_every)
    }

    /// True while the last successful renewal is recent enough to act on.
    pub fn still_valid(&self) -> bool {
        self.last_renew
            .is_some_and(|t| t.elapsed() < self.renew_deadline())
    }

    /// One election round: create, renew or take over the Lease.
    pub async fn round(&mut self) -> Result<Round> {
        let current = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(|e| self.err("get", e))?;
        let Some(mut lease) = current else {
            return self.create().await;
        };
        let spec = lease.spec.take().unwrap_or_default();
        let seen = record(&spec);
        let now = Instant::now();
        let seen_since = match &self.observed {
            Some((r, since)) if *r == seen => *since,
            _ => now,
        };
        let holder = seen.0.clone();
        self.observed = Some((seen, seen_since));
        let duration = spec
            .lease_duration_seconds
            .filter(|s| *s > 0)
            .map(|s| Duration::from_secs(s as u64))
            .unwrap_or(self.config.duration);
        let expired = holder.is_none() || now.duration_since(seen_since) >= duration;
        if !self.mine(&spec) && !expired {
            self.last_renew = None;
            return Ok(Round::Follower {
                holder: holder.unwrap_or_default(),
            });
        }
        // Renewed (this replica's) or taken over (expired), guarded by the
        // resourceVersion it was read with.
        lease.spec = Some(self.spec_for_me(Some(&spec)));
        let replaced = self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await;
        match replaced {
            Ok(written) => {
                let written = record(&written.spec.unwrap_or_default());
                self.observed = Some((written, Instant::now()));
                self.last_renew = Some(Instant::now());
                Ok(Round::Leader)
            }
            Err(e) if is_conflict(&e) => {
                self.last_renew = None;
                Ok(Round::Follower {
                    holder: "(another replica)".to_string(),
                })
            }
            Err(e) => Err(self.err("replace", e)),
        }
    }

    /// No Lease yet: creates it, held by this replica.
    async fn create(&mut self) -> Result<Round> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.config.name.clone()),
                namespace: Some(self.config.namespace.clone()),
                ..Default::default()
            },
            spec: Some(self.spec_for_me(None)),
        };
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(_) => {
                self.last_renew = Some(Instant::now());
                Ok(Round::Leader)
            }
            Err(e) if is_conflict(&e) => Ok(Round::Follower {
                holder: "(another replica)".to_string(),
            }),
            Err(e) => Err(self.err("create", e)),
        }
    }

    /// Gives the Lease up if this replica holds it (on shutdown), so that
    /// another replica takes over without waiting for expiry.
    pub async fn release(&mut self) -> Result<bool> {
        self.last_renew = None;
        let Some(mut lease) = self
            .api
            .get_opt(&self.config.name)
            .await
            .map_err(|e| self.err("get", e))?
        else {
            return Ok(false);
        };
        let spec = lease.spec.get_or_insert_with(Default::default);
        if !self.mine(spec) {
            return Ok(false);
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(self.err("release", e)),
        }
    }

    /// The election: a round every `renew_every` until `stop`, leadership
    /// published on `leader` and in `leader_metric` (the
    /// `knative_ha_webhook_reconcile_leader` gauge); then gives the Lease up.
    pub async fn run(
        mut self,
        leader: watch::Sender<bool>,
        leader_metric: Gauge,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            let was = *leader.borrow();
            let leading = self.lead(was).await;
            leader.send_if_modified(|l| std::mem::replace(l, leading) != leading);
            leader_metric.set(i64::from(leading));
            tokio::select! {
                _ = tokio::time::sleep(self.config.renew_every) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        leader.send_replace(false);
        leader_metric.set(0);
        match self.release().await {
            Ok(true) => tracing::info!("reconcile: released the Lease"),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(error = %crate::errors::Chain(&e), "reconcile: releasing the Lease failed")
            }
        }
    }

    /// One round, logged where leadership changes hands: whether this
    /// replica leads now (`was`: whether it led before). The round is
    /// bounded by the renew deadline (while leading, until the last renewal
    /// stops being valid): a round whose request hangs never keeps a
    /// replica leading past it. A failed round keeps leading while the last
    /// renewal is still valid.
    async fn lead(&mut self, was: bool) -> bool {
        let since_renewal = self.last_renew.map_or(Duration::ZERO, |t| t.elapsed());
        let deadline = self.renew_deadline().saturating_sub(since_renewal);
        let round = match tokio::time::timeout(deadline, self.round()).await {
            Ok(round) => round,
            Err(_) => {
                self.last_renew = None;
                Err(LeaseError::Deadline {
                    namespace: self.config.namespace.clone(),
                    name: self.config.name.clone(),
                    deadline,
                })
            }
        };
        let leading = match round {
            Ok(Round::Leader) => true,
            Ok(Round::Follower { holder }) => {
                if was {
                    tracing::warn!(holder = %holder, "reconcile: lost the Lease");
                }
                false
            }
            Err(e) => {
                let valid = self.still_valid();
                tracing::warn!(error = %crate::errors::Chain(&e), still_leader = valid, "reconcile: Lease round failed");
                valid
            }
        };
        if leading && !was {
            tracing::info!(identity = %self.config.identity, "reconcile: acquired the Lease; this replica reconciles");
        }
        leading
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An API server that accepts connections and never answers.
    async fn silent_server() -> (String, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                held.push(conn);
            }
        });
        (url, task)
    }

    #[tokio::test]
    async fn a_round_that_hangs_stops_leading_at_the_renew_deadline() {
        let (url, server) = silent_server().await;
        let config = kube::Config::new(url.parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let mut elector = Elector::new(
            client,
            LeaseConfig {
                namespace: "khw".into(),
                name: LEASE_NAME.into(),
                identity: "me".into(),
                duration: Duration::from_millis(1500),
                renew_every: Duration::from_millis(500),
            },
        );
        elector.last_renew = Some(Instant::now());
        assert!(elector.still_valid());
        // The kube client's own read timeout is minutes: without a bound the
        // round would still hang when this test gives up.
        let leading = tokio::time::timeout(Duration::from_secs(60), elector.lead(true))
            .await
            .expect("the round is bounded");
        assert!(!leading, "no longer leading once the renewal ran out");
        assert!(!elector.still_valid());
        server.abort();
    }
}
