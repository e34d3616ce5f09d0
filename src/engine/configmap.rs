//! ConfigMap `config-leader-election` (docs/policy.md says what and why):
//! only the keys the policy sets, as strings in Knative's format (a
//! duration equal in value, `1m` vs `60s`, is left as written), each
//! recorded before its first change; never `_example` or Knative's
//! annotations (Knative validates `_example` against its checksum
//! annotation). The durations Knative would read once the policy's are
//! merged in (legacy camelCase keys included) are checked with client-go's
//! rules: where they would make every leader-elected process exit, none is
//! written (a warning says why), and recorded ones are put back only where
//! the result passes.

use serde_json::{Map, Value, json};

use super::change::What;
use super::patch::Patcher;
use super::records::{self, LEADER_ELECTION_KEYS, RecordedField};
use super::{EngineError, Fault, Handled, LEADER_ELECTION_CONFIGMAP, Target};
use crate::policy::LeaderElection;
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

/// Where a legacy key's value comes from, as the warnings show it.
const LEGACY: &str = "ConfigMap, legacy key Knative still reads";

/// Duration `i` (0 lease, 1 renew, 2 retry) as knative.dev/pkg reads it
/// (`leaderelection/config.go`): the camelCase legacy key first, then the
/// kebab-case key, which overrides only the key it names; Knative's default
/// when neither is there. The policy's value is the kebab key the engine
/// writes. `Ok`: the duration as the warnings show it (`KEY "TEXT" (FROM)`)
/// and its nanoseconds; `Err`: why Knative would refuse it (a legacy value
/// it cannot parse, whatever the engine writes).
fn knative_reads(
    t: &Target<'_>,
    ours: Option<&str>,
    data: Option<&Map<String, Value>>,
    i: usize,
) -> Result<Result<(String, u128), String>, EngineError> {
    let legacy = current(t, data, LEGACY_KEYS[i])?;
    let (key, text, from) = match legacy.filter(|text| parse_go_duration(text).is_err()) {
        Some(text) => (LEGACY_KEYS[i], text, LEGACY),
        None => match (ours, current(t, data, TIMING_KEYS[i])?, legacy) {
            (Some(text), _, _) => (TIMING_KEYS[i], text, "policy"),
            (None, Some(text), _) => (TIMING_KEYS[i], text, "ConfigMap"),
            (None, None, Some(text)) => (LEGACY_KEYS[i], text, LEGACY),
            (None, None, None) => (TIMING_KEYS[i], DEFAULTS[i], "Knative default"),
        },
    };
    let shown = format!("{key} {text:?} ({from})");
    Ok(match parse_go_duration(text) {
        Ok(0) => Err(format!(
            "{shown} must be greater than zero (client-go leader election refuses to start otherwise)"
        )),
        Ok(ns) => Ok((shown, ns)),
        Err(why) => Err(format!("{shown} is not a Go duration: {why}")),
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
    let mut shown = Vec::with_capacity(3);
    let mut ns = [0u128; 3];
    for i in 0..3 {
        match knative_reads(t, ours[i], data, i)? {
            Ok((read, v)) => {
                shown.push(read);
                ns[i] = v;
            }
            Err(problem) => return Ok(Some(problem)),
        }
    }
    let broken = broken_timing_rules(ns[0], ns[1], ns[2]);
    let problems: Vec<String> = broken
        .iter()
        .map(|r| {
            let (a, b) = r.fields();
            r.message(&shown[a], &shown[b], ns[2])
        })
        .collect();
    Ok((!problems.is_empty()).then(|| problems.join("; ")))
}

/// The policy's durations (lease, renew, retry).
fn durations(le: &LeaderElection) -> [Option<&str>; 3] {
    [
        le.lease_duration.as_deref(),
        le.renew_deadline.as_deref(),
        le.retry_period.as_deref(),
    ]
}

/// In [`context_data`]: the ConfigMap carries the opt-out label (a
/// ConfigMap key never holds a `/`, so this cannot be a data key).
const SKIPPED_MARK: &str = "knativeha.dev/skipped";
/// In [`context_data`]: the Knative Operator's resource owning the
/// ConfigMap (`Kind/name`).
const OPERATOR_OWNER_MARK: &str = "knativeha.dev/operator-owner";

/// What a snapshot's `leader_election` ([`super::Facts::leader_election`])
/// holds of a whole `config-leader-election` object: the duration keys the
/// rules read (kebab-case and legacy), and whether the engine leaves it
/// unchanged whatever the policy (the opt-out label) or unless the policy
/// governs the Operator's objects.
pub fn context_data(object: &Value) -> Map<String, Value> {
    let data = object.get(DATA).and_then(Value::as_object).into_iter();
    let mut out: Map<String, Value> = data
        .flatten()
        .filter(|(k, _)| TIMING_KEYS.contains(&k.as_str()) || LEGACY_KEYS.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
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
/// durations back, as [`mutate`] decides (a value Knative would refuse
/// too), for a leader-elected Deployment's hash. (The records the ConfigMap
/// undoes at the same time are not known here.)
pub(crate) fn durations_held_back(
    t: &Target<'_>,
    le: &LeaderElection,
    data: &Map<String, Value>,
) -> bool {
    let ours = durations(le);
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
    let buckets = buckets.map(|b| b.to_string());
    let ours = le.map_or([None; 3], durations);
    // The recorded keys no policy setting asks for any more: undone.
    let unasked = unasked(t, buckets.is_some(), ours);
    if le.is_none() && unasked.is_empty() {
        return Ok((None, Vec::new()));
    }
    let data = t.object_at(&[DATA])?;
    let mut changes = Vec::new();
    let (problem, undo_problem) = undo_plan(t, data, ours, &unasked)?;
    let timings = if problem.is_some() { [None; 3] } else { ours };
    let wanted = TIMING_KEYS.into_iter().zip(timings);
    let mut p: Option<Patcher> = None;
    for (key, want) in [(BUCKETS, buckets.as_deref())].into_iter().chain(wanted) {
        let Some(want) = want else { continue };
        let current = current(t, data, key)?;
        let same = current.is_some_and(|cur| {
            cur == want
                || (key != BUCKETS
                    && matches!((parse_go_duration(cur), parse_go_duration(want)), (Ok(a), Ok(b)) if a == b))
        });
        if same {
            continue;
        }
        let keys = LEADER_ELECTION_KEYS.iter().filter(|r| r.path[1] == key);
        let recorded: Vec<&RecordedField> = keys.collect();
        let pt = records::patcher(t, &mut p, &recorded)?;
        pt.set(&[DATA, key], json!(want))
            .map_err(|e| t.malformed(e))?;
        // The engine's last write, to tell a later change of someone else's.
        for w in recorded.iter().filter_map(|r| r.written) {
            records::annotate(t, pt, w, json!(want).to_string())?;
        }
        let before = current.map_or("unset".to_string(), |c| format!("{c:?}"));
        let field = What::field(format!("{DATA}.{key}"), before, format!("{want:?}"));
        changes.push(t.change(field));
    }
    for r in &unasked {
        // A key someone else changed since the engine wrote it keeps their
        // value: only its records go, whatever the durations' check says.
        if undo_problem.is_none() || !TIMING_KEYS.contains(&r.path[1]) || theirs(t, r)? {
            records::undo(t, &mut p, r, &mut changes)?;
        }
    }
    if let Some(problem) = problem {
        changes.push(t.change(What::Warning(format!(
            "leader election durations not written: {problem}"
        ))));
    }
    if let Some(problem) = undo_problem {
        changes.push(t.change(What::Warning(format!(
            "the recorded release durations are not put back (records kept): {problem}"
        ))));
    }
    Ok((p, changes))
}

/// The records of the keys the policy does not set (`buckets`: whether it
/// sets the buckets; `ours`: its durations): what no policy setting asks
/// for any more. Only annotations are looked at.
fn unasked(t: &Target<'_>, buckets: bool, ours: [Option<&str>; 3]) -> Vec<&'static RecordedField> {
    let asked = |key: &str| match TIMING_KEYS.iter().position(|k| *k == key) {
        Some(i) => ours[i].is_some(),
        None => buckets,
    };
    LEADER_ELECTION_KEYS
        .iter()
        .filter(|r| !asked(r.path[1]))
        .filter(|r| records::annotation(t.object, r.annotation).is_some())
        .collect()
}

/// Whether someone else changed `r`'s key since the engine wrote it (its
/// value stays when the record goes).
fn theirs(t: &Target<'_>, r: &RecordedField) -> Result<bool, EngineError> {
    records::changed_since_written(t.object, r)
        .map(|last| last.is_some())
        .map_err(|e| t.malformed(e))
}

/// Checks the durations Knative would read with the unasked recorded
/// durations put back (`data` as it would be after the undo) and the
/// policy's written: both when that is valid; else the undo alone when
/// that is; else neither (the ConfigMap keeps its durations, as when the
/// policy's are held back). Never a ConfigMap client-go would refuse.
/// Why the policy's durations are held back, and why the recorded ones are
/// not put back (None: written, put back).
fn undo_plan(
    t: &Target<'_>,
    data: Option<&Map<String, Value>>,
    ours: [Option<&str>; 3],
    unasked: &[&RecordedField],
) -> Result<(Option<String>, Option<String>), EngineError> {
    let mut undone = Vec::new();
    for r in unasked {
        if TIMING_KEYS.contains(&r.path[1]) && !theirs(t, r)? {
            undone.push(r);
        }
    }
    let writes = ours.iter().any(Option::is_some);
    let problem = |data| match writes {
        true => merged_timing_problem(t, ours, data),
        false => Ok(None),
    };
    if undone.is_empty() {
        return Ok((problem(data)?, None));
    }
    let mut after = data.cloned().unwrap_or_default();
    for r in &undone {
        match records::recorded(t.object, r).map_err(|e| t.malformed(e))? {
            Some(Some(value)) => after.insert(r.path[1].to_string(), value),
            _ => after.remove(r.path[1]),
        };
    }
    let both = problem(Some(&after))?;
    let alone = match &both {
        None if writes => None,
        _ => merged_timing_problem(t, [None; 3], Some(&after))?,
    };
    Ok((both, alone))
}
