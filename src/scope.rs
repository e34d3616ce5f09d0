//! The namespaces this process may act in (`serve --governed-namespaces`):
//! every policy source, the reconciler and the snapshot respect it.

use std::collections::BTreeSet;

/// The namespaces this process may govern (`--governed-namespaces`); all
/// when the flag is not set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowedNamespaces(Option<BTreeSet<String>>);

impl AllowedNamespaces {
    /// Every namespace (no `--governed-namespaces`).
    pub fn all() -> AllowedNamespaces {
        AllowedNamespaces(None)
    }

    /// Only these namespaces (empty names are ignored).
    pub fn only<I, S>(namespaces: I) -> AllowedNamespaces
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        AllowedNamespaces(Some(
            namespaces
                .into_iter()
                .map(Into::into)
                .map(|s: String| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect(),
        ))
    }

    pub fn allows(&self, namespace: &str) -> bool {
        self.0.as_ref().is_none_or(|set| set.contains(namespace))
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
    use super::AllowedNamespaces;

    #[test]
    fn governed_namespaces() {
        assert!(AllowedNamespaces::all().allows("anything"));
        let g = AllowedNamespaces::only(["knative-serving", " kourier-system "]);
        assert!(g.allows("knative-serving") && g.allows("kourier-system"));
        assert!(!g.allows("default"));
        assert_eq!(g.display(), "knative-serving,kourier-system");
    }
}
