//! PodDisruptionBudget rules: a budget must allow at least one voluntary
//! disruption, or every node drain and cluster upgrade blocks
//! (knative/serving#9990, knative/operator#376). A budget is compared with
//! the fewest replicas the policy gives a workload the budget covers.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{HighAvailabilityPolicySpec, Path, PodDisruptionBudgetPolicy, PolicyError};

/// The fewest replicas the policy produces for the workloads a budget
/// covers, with the field it comes from.
#[derive(Clone, Debug, PartialEq)]
pub struct Fewest {
    pub replicas: i32,
    pub source: String,
}

/// What leader election off means for replica counts (every governed
/// Deployment runs one replica).
fn disabled(spec: &HighAvailabilityPolicySpec) -> Option<Fewest> {
    spec.leader_election_off().then(|| Fewest {
        replicas: 1,
        source: "spec.leaderElection.enabled false".to_string(),
    })
}

/// Where the replicas come from when the policy sets none: what Knative
/// ships (its HPAs' minReplicas 1, its Deployments' spec.replicas 1).
const SHIPPED: &str = "Knative ships 1";

/// The fewest replicas under `spec.podDisruptionBudget`: the global replicas
/// (or what Knative ships) and every workload override without its own budget.
pub fn fewest_for_global(spec: &HighAvailabilityPolicySpec) -> Fewest {
    if let Some(off) = disabled(spec) {
        return off;
    }
    let global = match spec.replicas {
        Some(n) => (n, "spec.replicas".to_string()),
        None => (
            1,
            format!("spec.replicas unset: {SHIPPED}, the activator and webhook HPAs' minReplicas"),
        ),
    };
    let overrides = spec.workloads.iter().enumerate().filter_map(|(i, w)| {
        let r = w.replicas.filter(|_| w.pod_disruption_budget.is_none())?;
        Some((r, format!("spec.workloads[{i}].replicas")))
    });
    let (replicas, source) = overrides.fold(global, |a, b| if b.0 < a.0 { b } else { a });
    Fewest { replicas, source }
}

/// The replicas the Deployment `name` runs under the policy, the fewest
/// when an HPA scales it (its minReplicas is raised to them, never
/// lowered): one with leader election off or when Knative scales it on
/// demand; else its override, the global value, or what Knative ships.
pub fn replicas_of(spec: &HighAvailabilityPolicySpec, name: &str) -> Fewest {
    let i = spec.workloads.iter().position(|w| w.name == name);
    replicas_at(spec, i, name)
}

/// [`replicas_of`] the Deployment `name`, which workload `i` names.
pub fn replicas_at(spec: &HighAvailabilityPolicySpec, i: Option<usize>, name: &str) -> Fewest {
    if let Some(off) = disabled(spec) {
        return off;
    }
    let own = i.and_then(|i| Some((i, spec.workloads.get(i)?.replicas?)));
    let (replicas, source) = match (own, spec.replicas) {
        _ if crate::knative::is_scaled_on_demand(name) => (1, on_demand(name)),
        (Some((i, n)), _) => (n, format!("spec.workloads[{i}].replicas")),
        (None, Some(n)) => (n, "spec.replicas".to_string()),
        (None, None) => {
            let own = i.map_or(String::new(), |i| {
                format!("spec.workloads[{i}].replicas and ")
            });
            (1, format!("{own}spec.replicas unset: {SHIPPED} for {name}"))
        }
    };
    Fewest { replicas, source }
}

/// The voluntary disruptions a budget field allows with `replicas` pods, as
/// Kubernetes' disruption controller counts them (a percentage rounds up,
/// for either field); None for a value that is neither an integer nor "N%".
pub fn disruptions_allowed(min_available: bool, value: &IntOrString, replicas: i64) -> Option<i64> {
    let resolved = match value {
        IntOrString::Int(n) => i64::from(*n),
        IntOrString::String(s) => {
            let p = i64::from(parse_percent(s)?);
            (p.saturating_mul(replicas).saturating_add(99)) / 100
        }
    };
    Some(if min_available {
        replicas.saturating_sub(resolved)
    } else {
        resolved.min(replicas)
    })
}

/// Why a Deployment Knative scales on demand runs at most one replica.
pub fn on_demand(name: &str) -> String {
    format!(
        "{name} runs 0 or 1: eventing-controller scales it on demand, never to the policy's replicas"
    )
}

fn shown(v: &IntOrString) -> String {
    match v {
        IntOrString::Int(n) => n.to_string(),
        IntOrString::String(s) => format!("{s:?}"),
    }
}

const BLOCKS: &str =
    "allows no voluntary disruption, so every node drain and cluster upgrade would block";

/// Exactly one of the two fields, each well formed and allowing a disruption.
pub fn check(path: &Path, pdb: &PodDisruptionBudgetPolicy, fewest: &Fewest) -> Vec<PolicyError> {
    let mut errors = Vec::new();
    match (&pdb.min_available, &pdb.max_unavailable) {
        (Some(_), Some(_)) => errors.push(PolicyError::invalid(
            path.clone(),
            "set exactly one of minAvailable and maxUnavailable, got both",
        )),
        (None, None) => errors.push(PolicyError::invalid(
            path.clone(),
            "set exactly one of minAvailable and maxUnavailable, got neither",
        )),
        _ => {}
    }
    let max_path = path.key("maxUnavailable");
    if let Some(v) = &pdb.max_unavailable
        && well_formed(&max_path, v, &mut errors)
        && matches!(v, IntOrString::Int(0))
            | matches!(v, IntOrString::String(s) if parse_percent(s) == Some(0))
    {
        let message = format!("{} {BLOCKS}; use at least 1", shown(v));
        errors.push(PolicyError::invalid(max_path, message));
    }
    let min_path = path.key("minAvailable");
    if let Some(v) = &pdb.min_available
        && well_formed(&min_path, v, &mut errors)
        // With both set the budget is refused above; its replicas are moot.
        && pdb.max_unavailable.is_none()
    {
        min_available(min_path, v, fewest, &mut errors);
    }
    errors
}

fn min_available(path: Path, v: &IntOrString, f: &Fewest, errors: &mut Vec<PolicyError>) {
    if matches!(v, IntOrString::String(s) if parse_percent(s) == Some(100)) {
        errors.push(PolicyError::invalid(path, format!("{} {BLOCKS}", shown(v))));
        return;
    }
    let n = i64::from(f.replicas);
    let Some(allowed) = disruptions_allowed(true, v, n) else {
        return;
    };
    // What the budget keeps (a percentage rounds up).
    let needed = n - allowed;
    if allowed <= 0 {
        let how = match v {
            IntOrString::Int(_) => String::new(),
            IntOrString::String(_) => format!(" (rounds up to {needed})"),
        };
        let replicas = if n == 1 { "replica" } else { "replicas" };
        errors.push(PolicyError::invalid(
            path,
            format!(
                "{}{how} with {n} {replicas} ({}) {BLOCKS}; it must stay below {n}",
                shown(v),
                f.source
            ),
        ));
    }
}

fn well_formed(path: &Path, value: &IntOrString, errors: &mut Vec<PolicyError>) -> bool {
    let bad = match value {
        IntOrString::Int(n) => *n < 0,
        IntOrString::String(s) => parse_percent(s).is_none(),
    };
    if bad {
        errors.push(PolicyError::invalid(
            path.clone(),
            format!(
                "must be an integer >= 0 or a percentage \"0%\"..\"100%\", got {}",
                shown(value)
            ),
        ));
    }
    !bad
}

/// Parses an int-or-string "N%" with 0 <= N <= 100.
pub fn parse_percent(s: &str) -> Option<u32> {
    let digits = s.strip_suffix('%')?;
    if digits.is_empty() || digits.len() > 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u32 = digits.parse().ok()?;
    (n <= 100).then_some(n)
}

/// How many replicas above the fewest a budget moved into the other field
/// is judged at ([`in_field`]): an HPA's range, as Knative ships and the
/// policy raises it (the activator's 1..20 becomes 3..22).
const JUDGED_SPAN: i64 = 40;

/// The value of budget field `to` (`minAvailable` or `maxUnavailable`)
/// closest in meaning to the policy's `field: value` at every count from
/// `fewest` to 40 above it (the counts an HPA scales through):
/// at least one disruption at `fewest`; then the fewest disruptions beyond
/// what the policy allows at any count, then the closest at every count,
/// then a percentage where the policy wrote one (a count where it wrote a
/// count). None when no value allows a disruption at `fewest`.
pub fn in_field(field: &str, value: &IntOrString, to: &str, fewest: i64) -> Option<IntOrString> {
    let counts = fewest.max(1)..=fewest.max(1) + JUDGED_SPAN;
    let wanted: Vec<i64> = counts
        .clone()
        .map(|n| disruptions_allowed(field == "minAvailable", value, n).map(|a| a.max(1)))
        .collect::<Option<_>>()?;
    let percent_wanted = matches!(value, IntOrString::String(_));
    let candidates = (0..=100)
        .map(|p| IntOrString::String(format!("{p}%")))
        .chain(
            (0..=fewest.max(1) + JUDGED_SPAN)
                .filter_map(|n| Some(IntOrString::Int(i32::try_from(n).ok()?))),
        );
    candidates
        .filter_map(|c| {
            let got: Vec<i64> = counts
                .clone()
                .map(|n| disruptions_allowed(to == "minAvailable", &c, n))
                .collect::<Option<_>>()?;
            if got.first().is_none_or(|a| *a < 1) {
                return None;
            }
            let beyond: i64 = got.iter().zip(&wanted).map(|(g, w)| (g - w).max(0)).sum();
            let off: i64 = got.iter().zip(&wanted).map(|(g, w)| (g - w).abs()).sum();
            let kind = matches!(c, IntOrString::String(_)) != percent_wanted;
            Some(((beyond, off, kind), c))
        })
        .min_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> IntOrString {
        IntOrString::String(v.to_string())
    }

    /// The disruptions `to: v` allows at `n` replicas.
    fn at(to: &str, v: &IntOrString, n: i64) -> i64 {
        disruptions_allowed(to == "minAvailable", v, n).unwrap()
    }

    #[test]
    fn a_percentage_moved_into_the_release_field_stays_a_percentage() {
        // The activator: the policy's maxUnavailable 34% where the release
        // ships minAvailable 80%, judged at the HPA's raised minimum 3.
        let v = in_field("maxUnavailable", &s("34%"), "minAvailable", 3).unwrap();
        // 64%, not the 66% a subtraction gives: both round up, and 64%
        // comes closer at every count without ever allowing more.
        assert_eq!(v, s("64%"));
        for n in 3..=43 {
            let got = at("minAvailable", &v, n);
            let policy = at("maxUnavailable", &s("34%"), n);
            assert!(got >= 1 && got <= policy, "{n}: {got} vs {policy}");
        }
        // At 23 activators 8 may go at once, as the policy says, not 21.
        assert_eq!(at("minAvailable", &v, 23), 8);
    }

    #[test]
    fn a_count_moved_into_the_release_field_never_allows_more_than_it_can_help() {
        // eventing-webhook: maxUnavailable 1 where the release ships 80%.
        let v = in_field("maxUnavailable", &IntOrString::Int(1), "minAvailable", 3).unwrap();
        assert_eq!(at("minAvailable", &v, 3), 1);
        assert_eq!(
            at("minAvailable", &v, 5),
            1,
            "Knative's own 80% allows 1 at 5"
        );
        // minAvailable 2 (the old translation) let 3 of 5 go at once.
        assert_eq!(at("minAvailable", &IntOrString::Int(2), 5), 3);
        // The other way: minAvailable 2 where the release sets maxUnavailable.
        let v = in_field("minAvailable", &IntOrString::Int(2), "maxUnavailable", 3).unwrap();
        for n in 3..=43 {
            assert!(at("maxUnavailable", &v, n) <= n - 2, "{n}");
        }
        assert_eq!(at("maxUnavailable", &v, 3), 1);
    }

    #[test]
    fn one_replica_can_only_be_left_unprotected() {
        let v = in_field("maxUnavailable", &IntOrString::Int(1), "minAvailable", 1).unwrap();
        assert_eq!(at("minAvailable", &v, 1), 1);
    }
}
