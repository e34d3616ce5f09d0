//! The `deployments/scale` subresource (`autoscaling/v1` `Scale`): what
//! `kubectl scale` writes. The API server sends only the Scale, never the
//! Deployment, so the Deployment rule that removes `--disable-ha` from a
//! Deployment given more than one replica ([`super::leader`]) cannot act:
//! a Deployment the policy runs with `--disable-ha` (leader election
//! disabled, one replica) scaled this way would run several replicas
//! without a leader. Its Scale is held at one replica, with a warning
//! saying how to run more. Every other Scale passes unchanged.

use serde_json::json;

use super::change::{Change, Reason, What};
use super::patch::Patcher;
use super::{Handled, Target, leader};

const REPLICAS: &[&str] = &["spec", "replicas"];

pub(crate) fn mutate(t: &Target<'_>) -> super::Result<Handled> {
    // `want_flag(t, 1) == Some(true)`: at one replica the engine gives this
    // Deployment `--disable-ha` (a Knative binary that takes it, leader
    // election disabled by the policy, no HPA). An excluded Deployment never
    // gets the flag from the policy: its Scale passes.
    if t.is_excluded(t.name) || leader::want_flag(t, 1) != Some(true) {
        return Ok((None, Vec::new()));
    }
    let Some(replicas) = t.int_at(REPLICAS)? else {
        return Ok((None, Vec::new()));
    };
    if replicas <= 1 {
        return Ok((None, Vec::new()));
    }
    let mut p = Patcher::new(t.object);
    p.set(REPLICAS, json!(1)).map_err(|e| t.malformed(e))?;
    let why = format!(
        "it runs {} (leader election disabled by the policy), so more replicas would run without a leader; to run more, give it workloads[].replicas in the policy (the webhook then removes {})",
        super::DISABLE_HA_FLAG,
        super::DISABLE_HA_FLAG
    );
    let change = Change {
        reason: Some(Reason::Through {
            route: "the scale subresource",
            why,
        }),
        ..t.change(What::field(REPLICAS.join("."), replicas.to_string(), "1"))
    };
    Ok((Some(p), vec![change]))
}
