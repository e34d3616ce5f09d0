//! Tables in the docs that copy the code: the metrics docs/server.md and
//! docs/reconcile.md name are the metrics the process registers. (The
//! components table is checked in `knative`, the flag tables in `config`.)

use std::collections::BTreeSet;

use knative_ha_webhook::reconcile::ReconcileMetrics;
use knative_ha_webhook::sources::cluster::ClusterMetrics;
use knative_ha_webhook::telemetry::{self, Metrics};
use prometheus_client::registry::Registry;

use crate::support;

const PREFIX: &str = "knative_ha_webhook";

/// The metric names of `text`: `knative_ha_webhook_*` words, and the
/// `` `_name` `` short forms a table cell lists after a full name.
fn metric_words(text: &str) -> BTreeSet<String> {
    let full = text
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("knative_ha_webhook_"))
        .map(str::to_string);
    let short = text
        .split("`_")
        .skip(1)
        .filter_map(|rest| rest.split_once('`'))
        .map(|(name, _)| format!("{PREFIX}_{name}"));
    full.chain(short).collect()
}

/// Whether `name` is the family `family` or one of its series.
fn of_family(name: &str, family: &str) -> bool {
    name == family
        || ["_total", "_bucket", "_sum", "_count"]
            .iter()
            .any(|s| name.strip_suffix(s) == Some(family))
}

/// The metric families the process registers, read from the modules that
/// register them (a family without series is not in the exposition):
/// `"knative_ha_webhook_*"` literals, and telemetry's `n("*")`.
fn registered() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for path in [
        "src/telemetry/mod.rs",
        "src/reconcile/metrics.rs",
        "src/sources/cluster/metrics.rs",
    ] {
        let code = std::fs::read_to_string(support::repo_path(path)).unwrap();
        for (i, _) in code.match_indices(".register(") {
            let call = &code[i..];
            let call = &call[..call.find(';').unwrap_or(call.len())];
            let Some(first) = call.split('"').nth(1) else {
                continue;
            };
            if call.contains(&format!("n(\"{first}\")")) {
                out.insert(format!("{PREFIX}_{first}"));
            } else if first.starts_with(PREFIX) {
                out.insert(first.to_string());
            }
        }
    }
    out
}

#[test]
fn the_docs_name_every_metric_and_only_those() {
    let families = registered();
    assert!(families.len() >= 25, "read too few: {families:?}");
    // Each family the process exposes on its own is among those read.
    let mut registry = Registry::default();
    Metrics::register(&mut registry);
    ClusterMetrics::register(&mut registry);
    ReconcileMetrics::register(&mut registry);
    let exposed = telemetry::encode(&registry);
    for family in exposed
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
    {
        assert!(
            families.contains(family),
            "{family} registered but not read: {families:?}"
        );
    }
    let docs: String = ["docs/server.md", "docs/reconcile.md", "docs/operations.md"]
        .iter()
        .map(|p| std::fs::read_to_string(support::repo_path(p)).unwrap())
        .collect();
    let named = metric_words(&docs);
    let undocumented: Vec<&String> = families
        .iter()
        .filter(|f| !named.iter().any(|n| of_family(n, f)))
        .collect();
    assert!(
        undocumented.is_empty(),
        "metrics the docs do not name: {undocumented:?}"
    );
    let unknown: Vec<&String> = named
        .iter()
        .filter(|n| !families.iter().any(|f| of_family(n, f)))
        .collect();
    assert!(
        unknown.is_empty(),
        "the docs name metrics that do not exist: {unknown:?}"
    );
}

/// The governed kinds the docs list are [`KINDS`]: the `kind` label's values
/// in docs/server.md, and a row of docs/policy.md's "Object | Change" table
/// for each kind the reconciler lists (its first `apiVersion` in backticks,
/// then its name). A new kind
/// fails here until both name it.
#[test]
fn the_docs_list_every_governed_kind() {
    use knative_ha_webhook::engine::kinds::KINDS;
    let read = |p: &str| std::fs::read_to_string(support::repo_path(p)).unwrap();
    let server = read("docs/server.md");
    let start = server
        .find("`kind` is one of")
        .expect("docs/server.md: the kind label's values");
    let end = start
        + server[start..]
            .find("`operation`")
            .expect("the operation label after it");
    // The values, without the notes in parentheses after them.
    let mut values = String::new();
    let mut depth = 0;
    for c in server[start + "`kind` is one of".len()..end].chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ if depth == 0 => values.push(c),
            _ => {}
        }
    }
    let named: BTreeSet<&str> = values.split('`').skip(1).step_by(2).collect();
    let mut want: BTreeSet<&str> = KINDS.iter().map(|k| k.name).collect();
    want.extend(["HighAvailabilityPolicy", "other"]);
    assert_eq!(named, want, "docs/server.md's kind label values");

    let policy = read("docs/policy.md");
    let table = &policy[policy
        .find("| Object | Change |")
        .expect("docs/policy.md's Object | Change table")..];
    let rows: Vec<&str> = table
        .lines()
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.split('|').nth(1))
        .collect();
    for k in KINDS.iter().filter(|k| k.listed) {
        let version = format!("`{}`", k.api_versions[0]);
        assert!(
            rows.iter()
                .any(|r| r.trim().starts_with(&version) && r.contains(k.name)),
            "docs/policy.md's Object | Change table has no row for {version} {}: {rows:?}",
            k.name
        );
    }
}
