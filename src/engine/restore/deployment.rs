//! What `restore` removes from a Deployment besides the recorded fields:
//! what the engine owns outright (its marked anti-affinity terms, the
//! leader-election hash annotation) and `--disable-ha` as recorded.

use serde_json::{Map, Value};

use super::Named;
use crate::engine::affinity::{self, ANTI_AFFINITY, MATCH_LABELS};
use crate::engine::change::{TermOwner, What};
use crate::engine::leader::{ARGS, CONTAINERS};
use crate::engine::patch::Patcher;
use crate::engine::records::{ORIGINAL_DISABLE_HA, annotation};
use crate::engine::{Change, Fault};

/// Removes what the engine owns outright on a Deployment: its marked
/// anti-affinity terms (Knative's own terms stay) and the leader-election
/// hash annotation of the pod template ([`Named`]: the Deployment). The
/// changes.
pub(super) fn engine_owned(
    n: &Named<'_>,
    object: &Value,
    p: &mut Option<Patcher>,
) -> Result<Vec<Change>, Fault> {
    let mut changes = Vec::new();
    let empty = Map::new();
    let selector = crate::engine::lookup(object, MATCH_LABELS)
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let current = crate::engine::lookup(object, ANTI_AFFINITY);
    if let Some(value) = affinity::wanted(None, selector, current)? {
        affinity::put(p.get_or_insert_with(|| Patcher::new(object)), value)?;
        changes.push(n.restored(What::AntiAffinityRemoved(TermOwner::Engine)));
    }
    if let Some(what) = disable_ha(object, p)? {
        changes.push(n.restored(what));
    }
    if let Some(field) = crate::engine::leader::remove_hash(object, p) {
        changes.push(
            n.stated(What::Fields(vec![field]))
                .noted("restored; the pods roll"),
        );
    }
    Ok(changes)
}

/// Puts `--disable-ha` back as recorded in [`ORIGINAL_DISABLE_HA`]: removed
/// from every container when the release did not carry it, added to the
/// Knative container when it did; the record dropped. What changed; None
/// without a record.
pub(super) fn disable_ha(object: &Value, p: &mut Option<Patcher>) -> Result<Option<What>, Fault> {
    let Some(text) = annotation(object, ORIGINAL_DISABLE_HA) else {
        return Ok(None);
    };
    let had = match text.as_str() {
        Some("true") => true,
        Some("false") => false,
        _ => {
            return Err(Fault::record(
                ORIGINAL_DISABLE_HA,
                "\"true\" or \"false\"",
                text,
            ));
        }
    };
    let pt = p.get_or_insert_with(|| Patcher::new(object));
    let containers = crate::engine::lookup(&pt.doc, CONTAINERS)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let now = crate::engine::leader::carries_disable_ha(&pt.doc);
    let flag = crate::engine::DISABLE_HA_FLAG;
    let what = if had && !now {
        let name = crate::engine::lookup(object, super::NAME_PATH)
            .and_then(Value::as_str)
            .unwrap_or("");
        let Some(i) = crate::engine::leader::knative_container(name, &containers) else {
            return Ok(None);
        };
        crate::engine::leader::add_flag(pt, i, &containers[i])?;
        What::ContainerArg {
            container: None,
            arg: flag,
            added: true,
        }
    } else if !had && remove_everywhere(pt, &containers)? {
        What::ContainerArg {
            container: None,
            arg: flag,
            added: false,
        }
    } else {
        // Already as recorded: there (`had`) or absent.
        What::ArgKept {
            arg: flag,
            present: had,
            record: ORIGINAL_DISABLE_HA,
        }
    };
    pt.remove_annotation(ORIGINAL_DISABLE_HA);
    Ok(Some(what))
}

/// Removes `--disable-ha` from every container of `containers` (the pod
/// template's); an args list left empty (the engine created it, or removed
/// the flag earlier) goes too. Whether one carried it.
fn remove_everywhere(pt: &mut Patcher, containers: &[Value]) -> Result<bool, Fault> {
    let mut removed = false;
    for (i, c) in containers.iter().enumerate().rev() {
        let Some(list) = c.get(ARGS).and_then(Value::as_array) else {
            continue;
        };
        let idx = i.to_string();
        let args = ["spec", "template", "spec", "containers", &idx, ARGS];
        let found: Vec<usize> = (0..list.len())
            .filter(|j| {
                list[*j]
                    .as_str()
                    .is_some_and(crate::engine::leader::is_disable_ha_arg)
            })
            .collect();
        for j in found.iter().rev() {
            pt.remove_index(&args, *j)?;
        }
        removed |= !found.is_empty();
        if found.len() == list.len() {
            pt.remove(&args);
        }
    }
    Ok(removed)
}
