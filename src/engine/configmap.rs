//! ConfigMap `config-leader-election`: only the keys the policy sets
//! (`buckets`, `lease-duration`, `renew-deadline`, `retry-period`), as
//! strings in Knative's format. Never `_example`, never Knative's annotations
//! (Knative validates `_example` against its checksum annotation); the
//! release value of a key is recorded before its first change
//! ([`super::restore`], for the `restore` command). Durations equal in
//! value to what is there (`1m` vs `60s`) are left as written.
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

use super::patch::Patcher;
use super::{EngineError, Handled, LEADER_ELECTION_CONFIGMAP, Target};
use crate::policy::duration::parse_go_duration;
use crate::policy::schema_check::show;
use crate::policy::validate::broken_timing_rules;
use crate::policy::{
    DEFAULT_LEASE_DURATION, DEFAULT_RENEW_DEADLINE, DEFAULT_RETRY_PERIOD, LeaderElection,
};

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
        Some(other) => {
            Err(t.malformed(format!("data.{key} must be a string, got {}", show(other))))
        }
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

/// Why the merged durations would stop Knative, or None when they are valid
/// (or the policy sets no duration).
fn merged_timing_problem(
    t: &Target<'_>,
    le: &LeaderElection,
    data: Option<&Map<String, Value>>,
) -> Result<Option<String>, EngineError> {
    let ours = [&le.lease_duration, &le.renew_deadline, &le.retry_period];
    if ours.iter().all(|v| v.is_none()) {
        return Ok(None);
    }
    let mut merged = Vec::with_capacity(3);
    let mut ns = [0u128; 3];
    for i in 0..3 {
        match knative_reads(t, ours[i].as_deref(), data, i)? {
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
/// (kebab-case and legacy): what [`super::Context::leader_election`] needs.
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

/// Whether `config-leader-election` holding `data` holds the policy's
/// durations back: the decision of [`mutate`] (the same function), for a
/// leader-elected Deployment's hash ([`super::leader`]). A value Knative
/// would refuse (not a string) holds them back too: nothing is written.
pub(crate) fn durations_held_back(
    t: &Target<'_>,
    le: &LeaderElection,
    data: &Map<String, Value>,
) -> bool {
    !matches!(merged_timing_problem(t, le, Some(data)), Ok(None))
}

pub(crate) fn mutate(t: &Target<'_>) -> Result<Handled, EngineError> {
    // Cheap exit before anything is copied: other ConfigMaps can be large.
    if t.name != LEADER_ELECTION_CONFIGMAP {
        return Ok((None, Vec::new()));
    }
    let Some(le) = &t.policy.spec.leader_election else {
        return Ok((None, Vec::new()));
    };
    let data = t.object_at(&["data"])?;
    let mut changes = Vec::new();
    let problem = merged_timing_problem(t, le, data)?;
    let timings = if problem.is_some() {
        [None, None, None]
    } else {
        [
            le.lease_duration.as_deref().map(Cow::Borrowed),
            le.renew_deadline.as_deref().map(Cow::Borrowed),
            le.retry_period.as_deref().map(Cow::Borrowed),
        ]
    };
    let [lease, renew, retry] = timings;
    let buckets = if le.is_enabled() { le.buckets } else { Some(1) };
    let wanted: [(&str, Option<Cow<'_, str>>, bool); 4] = [
        ("buckets", buckets.map(|b| Cow::Owned(b.to_string())), false),
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
        let pt = super::restore::patcher(t, &mut p, &super::restore::recorded_key(key))?;
        pt.set(&["data", key], json!(want))
            .map_err(|e| t.malformed(e))?;
        changes.push(t.change(format!(
            "data.{key} {} -> {want:?}",
            current.map_or("unset".to_string(), |c| format!("{c:?}"))
        )));
    }
    if let Some(problem) = problem {
        changes.push(t.change(format!(
            "warning: leader election durations not written: {problem}"
        )));
    }
    Ok((p, changes))
}
