//! HorizontalPodAutoscalers (docs/policy.md says what and why): the Knative
//! Operator's rule from the originals (min, max) and the Deployment's
//! effective replicas N: when `min < N`, `minReplicas = N` and
//! `maxReplicas = max + (N - min)`; otherwise the originals, so lowering or
//! removing the policy brings the HPA back down, never below what others
//! set. The originals are recorded in [`ORIGINAL_MIN`] / [`ORIGINAL_MAX`],
//! the engine's writes in [`WRITTEN_MIN`] / [`WRITTEN_MAX`]; a value that
//! differs from the engine's last write was set by someone else since and
//! is that field's new original. (HPAs an earlier engine changed carry the
//! originals only: values the rule cannot have produced from them count as
//! set since.)

use serde_json::{Value, json};

use super::change::{FieldChange, What};
use super::patch::Patcher;
use super::records::{self, ANNOTATIONS, hpa_original_honoured};
use super::records::{ORIGINAL_MAX, ORIGINAL_MIN, WRITTEN_MAX, WRITTEN_MIN};
use super::{EngineError, Fault, Handled, Target};

const MIN: &[&str] = &["spec", "minReplicas"];
const MAX: &[&str] = &["spec", "maxReplicas"];
const TARGET_KIND: &[&str] = &["spec", "scaleTargetRef", "kind"];
/// The Deployment an HPA scales.
pub(crate) const TARGET_NAME: &[&str] = &["spec", "scaleTargetRef", "name"];

/// The Deployment an HPA belongs to: the one it scales, by name.
pub(crate) fn deployment<'a>(_: &'a str, hpa: &'a Value) -> [Option<&'a str>; 2] {
    [
        super::lookup(hpa, TARGET_NAME).and_then(Value::as_str),
        None,
    ]
}

fn recorded(t: &Target<'_>, key: &str) -> Result<Option<i64>, EngineError> {
    let annotations = t.object_at(ANNOTATIONS)?;
    Ok(annotations
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
        .and_then(|s| s.parse::<i64>().ok())
        .filter(|n| *n >= 0))
}

fn pair(t: &Target<'_>, keys: [&str; 2]) -> Result<Option<(i64, i64)>, EngineError> {
    Ok(recorded(t, keys[0])?.zip(recorded(t, keys[1])?))
}

/// The Operator's rule: `(min, max)` from the originals and N, `maxReplicas`
/// held within the int32 the HPA API stores (a release's 2147483647 stays
/// that, instead of an HPA the API server refuses).
fn rule((orig_min, orig_max): (i64, i64), n: Option<i64>) -> (i64, i64) {
    match n {
        Some(n) if n > orig_min => (
            n,
            orig_max
                .saturating_add(n.saturating_sub(orig_min))
                .max(n)
                .min(i64::from(i32::MAX).max(orig_max)),
        ),
        _ => (orig_min, orig_max),
    }
}

/// The originals to start from, and what says why they are not the recorded
/// ones (the fields set since the engine's last write; empty when none).
fn originals(t: &Target<'_>, current: (i64, i64)) -> Result<((i64, i64), String), EngineError> {
    let Some(recorded) = pair(t, [ORIGINAL_MIN, ORIGINAL_MAX])? else {
        return Ok((current, String::new()));
    };
    // A recorded bound above what the HPA holds and the policy's bound was
    // not recorded by the engine: that field starts from what it holds.
    let honoured = |orig: i64, now: i64| {
        if hpa_original_honoured(orig, now) {
            orig
        } else {
            now
        }
    };
    let orig = (
        honoured(recorded.0, current.0),
        honoured(recorded.1, current.1),
    );
    let Some(written) = pair(t, [WRITTEN_MIN, WRITTEN_MAX])? else {
        // RecordedField by an earlier engine: one of its writes, or set since.
        if current == orig || current == rule(orig, Some(current.0)) {
            return Ok((orig, String::new()));
        }
        let since = format!(
            "spec.minReplicas {} and spec.maxReplicas {} are not what the engine wrote from {}/{}",
            current.0, current.1, orig.0, orig.1
        );
        return Ok((current, since));
    };
    let fields = [
        ("spec.minReplicas", current.0, written.0, orig.0),
        ("spec.maxReplicas", current.1, written.1, orig.1),
    ];
    let mut start = fields.map(|(_, now, wrote, orig)| if now == wrote { orig } else { now });
    if current.0 > written.0 && current.1 == written.1 {
        // Only the minimum was set since (an admin raising it): the maximum
        // moves up with it, as the Operator's rule moves it, so the HPA
        // keeps the headroom it had above its minimum (never below the
        // engine's maximum, never down to the new minimum).
        start[1] = orig
            .1
            .saturating_add(current.0.saturating_sub(orig.0).max(0))
            .max(written.1)
            .min(i64::from(i32::MAX).max(written.1));
    }
    let since: Vec<String> = fields
        .iter()
        .filter(|(_, now, wrote, _)| now != wrote)
        .map(|(field, now, wrote, _)| {
            format!("{field} {now} was set since the engine wrote {wrote}")
        })
        .collect();
    Ok(((start[0], start[1]), since.join("; ")))
}

pub(crate) fn mutate(t: &Target<'_>) -> Result<Handled, EngineError> {
    let kind = t.str_at(TARGET_KIND)?;
    let Some(target) = t.str_at(TARGET_NAME)? else {
        return Ok((None, Vec::new()));
    };
    if kind != Some("Deployment") || t.is_excluded(target) {
        return Ok((None, Vec::new()));
    }
    let current_min = t.int_at(MIN)?;
    let Some(max) = t.int_at(MAX)? else {
        return Err(t.malformed(Fault::Missing {
            path: MAX.join("."),
        }));
    };
    let min = current_min.unwrap_or(1);
    let (orig, since) = originals(t, (min, max))?;
    let n = t.wanted_replicas(target).filter(|_| !t.ha_disabled());
    let n = n.map(i64::from);
    let (want_min, want_max) = rule(orig, n);
    if want_min == min && want_max == max {
        return Ok((None, Vec::new()));
    }
    let mut p = Patcher::new(t.object);
    for (key, v) in [
        (ORIGINAL_MIN, orig.0),
        (ORIGINAL_MAX, orig.1),
        (WRITTEN_MIN, want_min),
        (WRITTEN_MAX, want_max),
    ] {
        records::annotate(t, &mut p, key, v.to_string())?;
    }
    let mut fields = Vec::new();
    if want_min != min || current_min.is_none() {
        p.set(MIN, json!(want_min)).map_err(|e| t.malformed(e))?;
        let before = current_min.map_or("unset".to_string(), |m| m.to_string());
        fields.push(FieldChange::at(MIN, before, Some(want_min.to_string())));
    }
    if want_max != max {
        p.set(MAX, json!(want_max)).map_err(|e| t.malformed(e))?;
        fields.push(FieldChange::at(
            MAX,
            max.to_string(),
            Some(want_max.to_string()),
        ));
    }
    let from = if since.is_empty() {
        format!("from the original {}/{}", orig.0, orig.1)
    } else {
        format!("from {}/{}: {since}", orig.0, orig.1)
    };
    Ok((Some(p), vec![t.change(What::Fields(fields)).noted(from)]))
}

#[cfg(test)]
mod tests {
    use super::rule;

    #[test]
    fn the_raised_maximum_stays_within_int32() {
        let max = i64::from(i32::MAX);
        assert_eq!(rule((1, max), Some(100)), (100, max));
        assert_eq!(rule((1, max - 10), Some(100)), (100, max));
        assert_eq!(rule((1, 20), Some(5)), (5, 24));
        assert_eq!(rule((3, 20), Some(2)), (3, 20));
    }
}
