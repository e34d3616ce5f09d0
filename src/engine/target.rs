//! What a kind handler sees of the object and the policy ([`Target`]), and
//! the typed reads of object fields that report a malformed object.

use serde_json::Value;

use super::change::What;
use super::created::{created_for, taken_over};
use super::{Cause, Change, EngineError, Facts, Fault, Kind, hpa};
use crate::knative;
use crate::policy::{Policy, WorkloadOverride};

/// What a kind handler sees.
pub(crate) struct Target<'a> {
    pub policy: &'a Policy,
    /// What is known in the namespace.
    pub facts: Facts<'a>,
    pub kind: Kind,
    pub namespace: &'a str,
    pub name: &'a str,
    pub object: &'a Value,
}

impl Target<'_> {
    pub fn malformed(&self, fault: impl Into<Fault>) -> EngineError {
        self.kind.malformed(self.namespace, self.name, fault)
    }

    /// Whether the Deployment rolls out by RollingUpdate (the default), the
    /// only strategy whose maxSurge and maxUnavailable count.
    pub fn rolls_updates(&self) -> Result<bool, EngineError> {
        Ok(self
            .str_at(STRATEGY_TYPE)?
            .is_none_or(|s| s == "RollingUpdate"))
    }

    /// `kind/name: what (policy P)`.
    pub fn change(&self, what: What) -> Change {
        Change::new(
            self.kind.prefix(),
            self.name,
            what,
            Cause::Policy(self.policy.name.clone()),
        )
    }

    /// Reads an optional field (path of object keys) as `read` does; a
    /// value it does not take is not `want`.
    fn read<'v, T>(
        &'v self,
        path: &[&str],
        want: &'static str,
        read: impl Fn(&'v Value) -> Option<T>,
    ) -> Result<Option<T>, EngineError> {
        match lookup(self.object, path) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => read(v)
                .map(Some)
                .ok_or_else(|| self.malformed(Fault::mistyped(path.join("."), want, v))),
        }
    }

    pub fn int_at(&self, path: &[&str]) -> Result<Option<i64>, EngineError> {
        self.read(path, "an integer", Value::as_i64)
    }

    pub fn object_at(
        &self,
        path: &[&str],
    ) -> Result<Option<&serde_json::Map<String, Value>>, EngineError> {
        self.read(path, "an object", Value::as_object)
    }

    pub fn str_at(&self, path: &[&str]) -> Result<Option<&str>, EngineError> {
        self.read(path, "a string", Value::as_str)
    }

    pub fn is_excluded(&self, deployment: &str) -> bool {
        self.policy.spec.exclude.iter().any(|e| e == deployment)
    }

    pub fn workload(&self, deployment: &str) -> Option<&WorkloadOverride> {
        self.policy
            .spec
            .workloads
            .iter()
            .find(|w| w.name == deployment)
    }

    /// The replicas the policy wants for a Deployment (the workload's, else
    /// the global), ignoring leader election; None where Knative scales it
    /// on demand.
    pub fn wanted_replicas(&self, deployment: &str) -> Option<i32> {
        if knative::is_scaled_on_demand(deployment) {
            return None;
        }
        self.workload(deployment)
            .and_then(|w| w.replicas)
            .or(self.policy.spec.replicas)
    }

    /// True for a Deployment the policy governs: one of Knative's or one it
    /// names in `workloads` (never a user's own it does not name).
    pub fn governs(&self, deployment: &str) -> bool {
        knative::is_knative(deployment) || self.workload(deployment).is_some()
    }

    /// Whether this object is governed: a governed Deployment (or its
    /// Scale), an HPA scaling one, a PDB of one (it selects `app: <name>`
    /// or is named `<name>-pdb`; not one the reconciler created, see
    /// [`super::budgets`]), `config-leader-election`.
    pub fn governs_object(&self) -> Result<bool, EngineError> {
        match self.kind {
            Kind::ConfigMap => return Ok(self.name == super::LEADER_ELECTION_CONFIGMAP),
            // A budget the reconciler created, unless a release took it over.
            Kind::PodDisruptionBudget
                if created_for(self.object).is_some() && !taken_over(self.object) =>
            {
                return Ok(false);
            }
            // A target that is not a string is a malformed HPA.
            Kind::HorizontalPodAutoscaler => drop(self.str_at(hpa::TARGET_NAME)?),
            _ => {}
        }
        Ok(self.belongs_to().any(|d| self.governs(d)))
    }

    /// The Deployments this object belongs to ([`super::kinds::KindSpec::belongs_to`]).
    pub fn belongs_to(&self) -> impl Iterator<Item = &str> {
        (self.kind.spec().belongs_to)(self.name, self.object)
            .into_iter()
            .flatten()
    }

    pub fn is_hpa_backed(&self, deployment: &str) -> bool {
        knative::is_hpa_scaled(deployment)
            || self.facts.hpa_targets.contains(deployment)
            || self.hpa_skipped(deployment)
    }

    /// True when every HPA of the namespace is known and none targets
    /// `deployment` ([`super::HPAS_LISTED`]).
    pub fn hpa_absent(&self, deployment: &str) -> bool {
        self.facts.hpa_targets.contains(super::HPAS_LISTED)
            && !self.facts.hpa_targets.contains(deployment)
            && !self.hpa_skipped(deployment)
    }

    /// True when the HPA scaling `deployment` carries the opt-out label:
    /// the policy does not raise it ([`super::SKIPPED_HPA_TARGET`]).
    pub fn hpa_skipped(&self, deployment: &str) -> bool {
        !self.facts.hpa_targets.is_empty()
            && self
                .facts
                .hpa_targets
                .contains(&format!("{}{deployment}", super::SKIPPED_HPA_TARGET))
    }

    /// True when the policy turns leader election off.
    pub fn ha_disabled(&self) -> bool {
        self.policy
            .spec
            .leader_election
            .as_ref()
            .is_some_and(|le| !le.is_enabled())
    }
}

const STRATEGY_TYPE: &[&str] = &["spec", "strategy", "type"];

/// Walks object keys; `None` when a key is missing or a parent is not an
/// object (callers that write there report the malformed parent).
pub(crate) fn lookup<'v>(object: &'v Value, path: &[&str]) -> Option<&'v Value> {
    path.iter()
        .try_fold(object, |cur, key| cur.as_object()?.get(*key))
}

/// Errors when a parent of `path` exists but is not an object (or null).
pub(crate) fn check_parents(t: &Target<'_>, path: &[&str]) -> Result<(), EngineError> {
    for i in 1..path.len() {
        t.object_at(&path[..i])?;
    }
    Ok(())
}
