//! Policy sources: they build [`crate::store::Snapshot`]s and publish them
//! to a [`crate::store::PolicyStore`].
//!
//! - `file`: a policy file, re-read when it changes (`serve --policy-file`).
//! - `cluster`: HighAvailabilityPolicy resources and labelled ConfigMaps,
//!   watched through the API server (`serve` without `--policy-file`).
//! - [`Governed`]: the namespaces the process may act in
//!   (`serve --governed-namespaces`), which every source and the reconciler
//!   respect.

use std::collections::BTreeSet;

pub mod cluster;
pub mod file;

/// The namespaces this process may govern (`--governed-namespaces`); all
/// when the flag is not set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Governed(Option<BTreeSet<String>>);

impl Governed {
    /// Every namespace (no `--governed-namespaces`).
    pub fn all() -> Governed {
        Governed(None)
    }

    /// Only these namespaces (empty names are ignored).
    pub fn only<I, S>(namespaces: I) -> Governed
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Governed(Some(
            namespaces
                .into_iter()
                .map(Into::into)
                .map(|s: String| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
        ))
    }

    /// True when `namespace` may be governed.
    pub fn allows(&self, namespace: &str) -> bool {
        self.0.as_ref().is_none_or(|set| set.contains(namespace))
    }

    /// The list, when restricted.
    pub fn list(&self) -> Option<&BTreeSet<String>> {
        self.0.as_ref()
    }

    /// `a,b,c` for messages (`*` when unrestricted).
    pub fn display(&self) -> String {
        match &self.0 {
            None => "*".to_string(),
            Some(set) => set.iter().cloned().collect::<Vec<_>>().join(","),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Governed;

    #[test]
    fn governed_namespaces() {
        assert!(Governed::all().allows("anything"));
        let g = Governed::only(["knative-serving", " kourier-system "]);
        assert!(g.allows("knative-serving") && g.allows("kourier-system"));
        assert!(!g.allows("default"));
        assert_eq!(g.display(), "knative-serving,kourier-system");
    }
}
