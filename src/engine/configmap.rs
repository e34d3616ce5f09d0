//! ConfigMap `config-leader-election`: only the keys the policy sets
//! (`buckets`, `lease-duration`, `renew-deadline`, `retry-period`), as
//! strings in Knative's format. Never `_example`, never Knative's annotations
//! (Knative validates `_example` against its checksum annotation); the
//! release value of a key is recorded before its first change
//! ([`super::restore`], for the `restore` command). Durations equal in
//! value to what is there (`1m` vs `60s`) are left as written. A recorded
//! key the policy no longer sets (no `leaderElection`, or not that key) is
//! put back, the durations only when what Knative then reads passes the
//! merged check below (else they stay, with a warning).
//!
//! The policy's durations are merged over the ConfigMap's (Knative's
//! defaults for keys neither sets) and checked with client-go's rules; when
//! the merged set would make every leader-elected process exit, no duration
//! is written and a warning names the rule and the values. The ConfigMap is
//! read as Knative reads it: the legacy camelCase keys (`leaseDuration`,
//! `renewDeadline`, `retryPeriod`) count unless the kebab-case key of the
//! same duration is there.

use std::borrow::Cow;

use serde_json::{Map, Value, json};

use super::change::What;
use super::patch::Patcher;
use super::{EngineError, Fault, Handled, LEADER_ELECTION_CONFIGMAP, Target};
use crate::policy::duration::parse_go_duration;
use crate::policy::validate::broken_timing_rules;
use crate::policy::{DEFAULT_LEASE_DURATION, DEFAULT_RENEW_DEADLINE, DEFAULT_RETRY_PERIOD};

const DATA: &str = "data";
const BUCKETS: &str = "buckets";
const TIMING_KEYS: [&str; 3] = ["lease-duration", "renew-deadline", "retry-period"];
/// The camelCase keys knative.dev/pkg still reads before the kebab ones.
pub const LEGACY_KEYS: [&str; 3] = ["leaseDuration", "renewDeadline", "retryPeriod"];
const DEFAULTS: [&str; 3] = [
    DEFAULT_LEASE_DURATION,
    DEFAULT_RENEW_DEADLINE,
    DEFAULT_RETRY_PERIOD,
];

fn current<'v>(
    t: &Target<'_>,
    data: Option<&'v Map<String, Value>>,
    key: &str,
) -> Result<Option<&'v str>, EngineError> {
    match data.and_then(|d| d.get(key)) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(other) => Err(t.malformed(Fault::mistyped(format!("data.{key}"), "a string", other))),
    }
}

/// One duration as Knative will read it once the engine's keys are written:
/// the key it comes from, its text and where that is.
struct Read<'v> {
    key: &'static str,
    text: &'v str,
    from: &'static str,
}

/// Where a legacy key's value comes from, as the warnings show it.
const LEGACY: &str = "ConfigMap, legacy key Knative still reads";

/// Duration `i` (0 lease, 1 renew, 2 retry) as knative.dev/pkg reads it
/// (`leaderelection/config.go`): the camelCase legacy key first, then the
/// kebab-case key, which overrides only the key it names; Knative's default
/// when neither is there. The policy's value is the kebab key the engine
/// writes. `Err` says why Knative would refuse the ConfigMap whatever the
/// engine writes (a legacy value it cannot parse).
fn knative_reads<'v>(
    t: &Target<'_>,
    ours: Option<&'v str>,
    data: Option<&'v Map<String, Value>>,
    i: usize,
) -> Result<Result<(Read<'v>, u128), String>, EngineError> {
    let legacy = current(t, data, LEGACY_KEYS[i])?;
    if let Some(text) = legacy
        && let Err(why) = parse_go_duration(text)
    {
        let key = LEGACY_KEYS[i];
        return Ok(Err(format!(
            "{key} {text:?} ({LEGACY}) is not a Go duration: {why}"
        )));
    }
    let read = match (ours, current(t, data, TIMING_KEYS[i])?, legacy) {
        (Some(text), _, _) => Read {
            key: TIMING_KEYS[i],
            text,
            from: "policy",
        },
        (None, Some(text), _) => Read {
            key: TIMING_KEYS[i],
            text,
            from: "ConfigMap",
        },
        (None, None, Some(text)) => Read {
            key: LEGACY_KEYS[i],
            text,
            from: LEGACY,
        },
        (None, None, None) => Read {
            key: TIMING_KEYS[i],
            text: DEFAULTS[i],
            from: "Knative default",
        },
    };
    let (key, text, from) = (read.key, read.text, read.from);
    Ok(match parse_go_duration(text) {
        Ok(0) => Err(format!(
            "{key} {text:?} ({from}) must be greater than zero (client-go leader election refuses to start otherwise)"
        )),
        Ok(ns) => Ok((read, ns)),
        Err(why) => Err(format!(
            "{key} {text:?} ({from}) is not a Go duration: {why}"
        )),
    })
}

/// Why the durations Knative would read once `ours` (the policy's, as the
/// kebab-case keys) are written over `data` would stop it, or None when
/// they are valid.
fn merged_timing_problem(
    t: &Target<'_>,
    ours: [Option<&str>; 3],
    data: Option<&Map<String, Value>>,
) -> Result<Option<String>, EngineError> {
    let mut merged = Vec::with_capacity(3);
    let mut ns = [0u128; 3];
    for i in 0..3 {
        match knative_reads(t, ours[i], data, i)? {
            Ok((read, v)) => {
                merged.push(read);
                ns[i] = v;
            }
            Err(problem) => return Ok(Some(problem)),
        }
    }
    let broken = broken_timing_rules(ns[0], ns[1], ns[2]);
    if broken.is_empty() {
        return Ok(None);
    }
    // Only now, with something to say, are the values written out.
    let shown: Vec<String> = merged
        .iter()
        .map(|r| format!("{} {:?} ({})", r.key, r.text, r.from))
        .collect();
    Ok(Some(
        broken
            .iter()
            .map(|r| {
                let (a, b) = r.fields();
                r.message(&shown[a], &shown[b], ns[2])
            })
            .collect::<Vec<_>>()
            .join("; "),
    ))
}

/// True for the keys of `config-leader-election` the duration rules read
/// (kebab-case and legacy): what a snapshot's `leader_election` ([`super::Facts::leader_election`]) needs.
pub fn is_duration_key(key: &str) -> bool {
    TIMING_KEYS.contains(&key) || LEGACY_KEYS.contains(&key)
}

/// The duration keys of a `config-leader-election`'s `data`.
pub fn duration_data(data: &Map<String, Value>) -> Map<String, Value> {
    data.iter()
        .filter(|(k, _)| is_duration_key(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// In a snapshot's `leader_election` ([`super::Facts::leader_election`]): the ConfigMap carries the opt-out
/// label (a ConfigMap key never holds a `/`, so this cannot be a data key).
pub const SKIPPED_MARK: &str = "knativeha.dev/skipped";
/// In a snapshot's `leader_election` ([`super::Facts::leader_election`]): the Knative Operator's resource
/// owning the ConfigMap (`Kind/name`).
pub const OPERATOR_OWNER_MARK: &str = "knativeha.dev/operator-owner";

/// What a snapshot's `leader_election` ([`super::Facts::leader_election`]) holds of a whole
/// `config-leader-election` object: its duration keys, and whether the
/// engine leaves it unchanged whatever the policy (the opt-out label) or
/// unless the policy governs the Operator's objects.
pub fn context_data(object: &Value) -> Map<String, Value> {
    let mut out = object
        .get(DATA)
        .and_then(Value::as_object)
        .map(duration_data)
        .unwrap_or_default();
    let metadata = object.get("metadata").and_then(Value::as_object);
    if super::skipped(metadata) {
        out.insert(SKIPPED_MARK.into(), Value::Bool(true));
    }
    if let Some(owner) = super::operator_owner(metadata) {
        out.insert(OPERATOR_OWNER_MARK.into(), Value::String(owner));
    }
    out
}

/// Why the namespace's `config-leader-election` (as `data` says, from
/// [`context_data`]) gets none of the policy's settings, or None.
pub(crate) fn left_unchanged(t: &Target<'_>, data: &Map<String, Value>) -> Option<String> {
    if data.contains_key(SKIPPED_MARK) {
        return Some(format!(
            "{LEADER_ELECTION_CONFIGMAP} carries the opt-out label {}",
            super::SKIP_LABEL
        ));
    }
    let owner = data.get(OPERATOR_OWNER_MARK)?.as_str()?;
    (!t.policy.spec.governs_operator_owned())
        .then(|| format!("{LEADER_ELECTION_CONFIGMAP} is owned by the Knative Operator's {owner}"))
}

/// Whether `config-leader-election` holding `data` holds the policy's
/// durations back: the decision of [`mutate`] (the same function), for a
/// leader-elected Deployment's hash ([`super::leader`]). A value Knative
/// would refuse (not a string) holds them back too: nothing is written.
/// (The ConfigMap's records of durations being undone at the same time are
/// not known here: the Deployment's view has only the duration keys.)
pub(crate) fn durations_held_back(
    t: &Target<'_>,
    le: &crate::policy::LeaderElection,
    data: &Map<String, Value>,
) -> bool {
    let ours = [
        le.lease_duration.as_deref(),
        le.renew_deadline.as_deref(),
        le.retry_period.as_deref(),
    ];
    ours.iter().any(Option::is_some)
        && !matches!(merged_timing_problem(t, ours, Some(data)), Ok(None))
}

pub(crate) fn mutate(t: &Target<'_>) -> Result<Handled, EngineError> {
    // Cheap exit before anything is copied: other ConfigMaps can be large.
    if t.name != LEADER_ELECTION_CONFIGMAP {
        return Ok((None, Vec::new()));
    }
    let le = t.policy.spec.leader_election.as_ref();
    let buckets = le.and_then(|le| if le.is_enabled() { le.buckets } else { Some(1) });
    let ours = le.map_or([None; 3], |le| {
        [
            le.lease_duration.as_deref(),
            le.renew_deadline.as_deref(),
            le.retry_period.as_deref(),
        ]
    });
    // The recorded keys no policy setting asks for any more: undone.
    let unasked = unasked(t, buckets.is_some(), ours);
    if le.is_none() && unasked.is_empty() {
        return Ok((None, Vec::new()));
    }
    let data = t.object_at(&[DATA])?;
    let mut changes = Vec::new();
    let undo = undo_plan(t, data, ours, &unasked)?;
    let timings = if undo.problem.is_some() {
        [None, None, None]
    } else {
        ours
    };
    let [lease, renew, retry] = timings.map(|v| v.map(Cow::Borrowed));
    let wanted: [(&str, Option<Cow<'_, str>>, bool); 4] = [
        (BUCKETS, buckets.map(|b| Cow::Owned(b.to_string())), false),
        (TIMING_KEYS[0], lease, true),
        (TIMING_KEYS[1], renew, true),
        (TIMING_KEYS[2], retry, true),
    ];
    let mut p: Option<Patcher> = None;
    for (key, want, is_duration) in wanted {
        let Some(want) = want else { continue };
        let current = current(t, data, key)?;
        let same = match current {
            Some(cur) if cur == want.as_ref() => true,
            Some(cur) if is_duration => {
                matches!((parse_go_duration(cur), parse_go_duration(&want)), (Ok(a), Ok(b)) if a == b)
            }
            _ => false,
        };
        if same {
            continue;
        }
        let records = super::records::recorded_key(key);
        let pt = super::records::patcher(t, &mut p, &records)?;
        pt.set(&[DATA, key], json!(want))
            .map_err(|e| t.malformed(e))?;
        for r in records {
            super::records::note_written(t, pt, r, &json!(want))?;
        }
        let before = current.map_or("unset".to_string(), |c| format!("{c:?}"));
        let field = What::field(format!("{DATA}.{key}"), before, format!("{want:?}"));
        changes.push(t.change(field));
    }
    for r in &unasked {
        // A key someone else changed since the engine wrote it keeps their
        // value: only its records go, whatever the durations' check says.
        if undo.durations || !TIMING_KEYS.contains(&r.path[1]) || theirs(t, r)? {
            super::records::undo(t, &mut p, r, &mut changes)?;
        }
    }
    if let Some(problem) = undo.problem {
        changes.push(t.change(What::Warning(format!(
            "leader election durations not written: {problem}"
        ))));
    }
    if let Some(problem) = undo.undo_problem {
        changes.push(t.change(What::Warning(format!(
            "the recorded release durations are not put back (records kept): {problem}"
        ))));
    }
    Ok((p, changes))
}

/// The records of the keys the policy does not set (`buckets`: whether it
/// sets the buckets; `ours`: its durations): what no policy setting asks
/// for any more. Only annotations are looked at.
fn unasked(
    t: &Target<'_>,
    buckets: bool,
    ours: [Option<&str>; 3],
) -> Vec<&'static super::records::RecordedField> {
    let asked = |key: &str| match TIMING_KEYS.iter().position(|k| *k == key) {
        Some(i) => ours[i].is_some(),
        None => buckets,
    };
    super::records::LEADER_ELECTION_KEYS
        .iter()
        .filter(|r| !asked(r.path[1]))
        .filter(|r| super::records::annotation(t.object, r.annotation).is_some())
        .collect()
}

/// Whether someone else changed `r`'s key since the engine wrote it (its
/// value stays when the record goes).
fn theirs(t: &Target<'_>, r: &super::records::RecordedField) -> Result<bool, EngineError> {
    super::records::changed_since_written(t.object, r)
        .map(|last| last.is_some())
        .map_err(|e| t.malformed(e))
}

/// What the merged-duration check allows once the unasked records are
/// undone.
struct UndoPlan {
    /// Why the policy's durations are held back (None: written).
    problem: Option<String>,
    /// Whether the recorded durations are put back.
    durations: bool,
    /// Why they are not.
    undo_problem: Option<String>,
}

/// Checks the durations Knative would read with the unasked recorded
/// durations put back (`data` as it would be after the undo) and the
/// policy's written: both when that is valid; else the undo alone when
/// that is; else neither (the ConfigMap keeps its durations, as when the
/// policy's are held back). Never a ConfigMap client-go would refuse.
fn undo_plan(
    t: &Target<'_>,
    data: Option<&Map<String, Value>>,
    ours: [Option<&str>; 3],
    unasked: &[&super::records::RecordedField],
) -> Result<UndoPlan, EngineError> {
    let mut undone = Vec::new();
    for r in unasked {
        if TIMING_KEYS.contains(&r.path[1]) && !theirs(t, r)? {
            undone.push(r);
        }
    }
    let writes = ours.iter().any(Option::is_some);
    if undone.is_empty() {
        let problem = match writes {
            true => merged_timing_problem(t, ours, data)?,
            false => None,
        };
        return Ok(UndoPlan {
            problem,
            durations: false,
            undo_problem: None,
        });
    }
    let mut after = data.cloned().unwrap_or_default();
    for r in &undone {
        match super::records::recorded(t.object, r).map_err(|e| t.malformed(e))? {
            Some(Some(value)) => {
                after.insert(r.path[1].to_string(), value);
            }
            _ => {
                after.remove(r.path[1]);
            }
        }
    }
    let both = match writes {
        true => merged_timing_problem(t, ours, Some(&after))?,
        false => None,
    };
    let alone = match &both {
        None if writes => None,
        _ => merged_timing_problem(t, [None; 3], Some(&after))?,
    };
    Ok(UndoPlan {
        problem: both,
        durations: alone.is_none(),
        undo_problem: alone,
    })
}
