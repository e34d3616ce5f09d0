//! The engine's undo of leader election on a Deployment once the policy
//! sets no `leaderElection` any more: the settings hash goes (the
//! leader-elected Deployments roll together onto the release's
//! `config-leader-election`) and `--disable-ha` goes back as recorded in
//! [`ORIGINAL_DISABLE_HA`], but only where the invariant of
//! [`crate::engine::leader`] allows it (one replica, no HPA): elsewhere the
//! flag stays off and the record stays, to be put back when it may be.

use crate::engine::change::{Change, What};
use crate::engine::leader::remove_hash;
use crate::engine::patch::Patcher;
use crate::engine::records::{ORIGINAL_DISABLE_HA, annotation};
use crate::engine::{EngineError, Target};

/// Undoes what leader election wrote on the Deployment `t` (its policy has
/// no `leaderElection`); `replicas` is the count after the mutation.
pub(crate) fn undo(
    t: &Target<'_>,
    p: &mut Option<Patcher>,
    replicas: i64,
    changes: &mut Vec<Change>,
) -> Result<(), EngineError> {
    flag(t, p, replicas, changes)?;
    if let Some(field) = remove_hash(t.object, p) {
        changes.push(t.change(What::Fields(vec![field])).noted(
            "no policy setting asks for leader election settings any more: the leader-elected Deployments restart together",
        ));
    }
    Ok(())
}

/// `--disable-ha` back as recorded, and the record dropped, when the
/// invariant allows the recorded state.
fn flag(
    t: &Target<'_>,
    p: &mut Option<Patcher>,
    replicas: i64,
    changes: &mut Vec<Change>,
) -> Result<(), EngineError> {
    // (A malformed record is reported by `disable_ha`.)
    let had = annotation(t.object, ORIGINAL_DISABLE_HA).and_then(|v| v.as_str()) == Some("true");
    if had && (replicas != 1 || t.is_hpa_backed(t.name)) {
        // Several replicas (or an HPA) without a leader all reconcile every
        // key: the flag stays off until the release's one replica is back.
        return Ok(());
    }
    if let Some(what) = super::deployment::disable_ha(t.object, p).map_err(|e| t.malformed(e))? {
        changes.push(t.change(what).noted(
            "the recorded release value: no policy setting asks for leader election any more",
        ));
    }
    Ok(())
}
