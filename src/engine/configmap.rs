//! ConfigMap `config-leader-election`: only the keys the policy sets
//! (`buckets`, `lease-duration`, `renew-deadline`, `retry-period`), as
//! strings in Knative's format. Never `_example`, never annotations (Knative
//! validates `_example` against its checksum annotation). Durations equal in
//! value to what is there (`1m` vs `60s`) are left as written.

use serde_json::{Value, json};

use super::patch::Patcher;
use super::{EngineError, Handled, LEADER_ELECTION_CONFIGMAP, Target};
use crate::policy::duration::parse_go_duration;
use crate::policy::schema_check::show;

pub(crate) fn mutate(t: &Target<'_>) -> Result<Handled, EngineError> {
    // Cheap exit before anything is copied: other ConfigMaps can be large.
    if t.name != LEADER_ELECTION_CONFIGMAP {
        return Ok((None, Vec::new()));
    }
    let Some(le) = &t.policy.spec.leader_election else {
        return Ok((None, Vec::new()));
    };
    let buckets = if le.is_enabled() { le.buckets } else { Some(1) };
    let wanted: [(&str, Option<String>, bool); 4] = [
        ("buckets", buckets.map(|b| b.to_string()), false),
        ("lease-duration", le.lease_duration.clone(), true),
        ("renew-deadline", le.renew_deadline.clone(), true),
        ("retry-period", le.retry_period.clone(), true),
    ];
    let data = t.object_at(&["data"])?;
    let mut p: Option<Patcher> = None;
    let mut changes = Vec::new();
    for (key, want, is_duration) in wanted {
        let Some(want) = want else { continue };
        let current = match data.and_then(|d| d.get(key)) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.as_str()),
            Some(other) => {
                return Err(
                    t.malformed(format!("data.{key} must be a string, got {}", show(other)))
                );
            }
        };
        let same = match current {
            Some(cur) if cur == want => true,
            Some(cur) if is_duration => {
                matches!((parse_go_duration(cur), parse_go_duration(&want)), (Ok(a), Ok(b)) if a == b)
            }
            _ => false,
        };
        if same {
            continue;
        }
        let pt = p.get_or_insert_with(|| Patcher::new(t.object));
        pt.set(&["data", key], json!(want))
            .map_err(|e| t.malformed(e))?;
        changes.push(t.change(format!(
            "data.{key} {} -> {want:?}",
            current.map_or("unset".to_string(), |c| format!("{c:?}"))
        )));
    }
    Ok((p, changes))
}
