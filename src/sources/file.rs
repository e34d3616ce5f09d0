//! Policy from a file, re-read when it changes.
//!
//! The file is polled by content (so a ConfigMap volume's `..data` symlink
//! swap is seen like an in-place write). A valid new version is published
//! as a new [`Snapshot`]; an invalid one is logged and counted and the
//! previous snapshot stays in force.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::engine::{Snapshot, Unclaimed};
use crate::policy::PolicyError;
use crate::scope::AllowedNamespaces;
use crate::store::PolicyStore;
use crate::telemetry::Metrics;

/// How often the file is re-read.
pub const POLL_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum FileSourceError {
    #[error("reading policy file {path}")]
    Read {
        path: PathBuf,
        #[source]
        error: std::io::Error,
    },
    #[error("policy file {path}")]
    Invalid {
        path: PathBuf,
        #[source]
        error: PolicyError,
    },
    #[error(
        "policy file {path}: policy {policy:?} has spec.targetNamespace {namespace:?}, \
         which is not in --governed-namespaces ({governed}); add the namespace to the flag \
         or remove the policy"
    )]
    NotGoverned {
        path: PathBuf,
        policy: String,
        namespace: String,
        governed: String,
    },
}

pub type Result<T, E = FileSourceError> = std::result::Result<T, E>;

/// Reads and parses the file; returns its bytes and the snapshot.
pub fn load(path: &Path) -> Result<(Vec<u8>, Snapshot)> {
    let bytes = read(path)?;
    let snapshot = snapshot(&bytes, path, &AllowedNamespaces::all())?;
    Ok((bytes, snapshot))
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|error| FileSourceError::Read {
        path: path.to_path_buf(),
        error,
    })
}

/// The snapshot of a file holding `bytes`: its policy documents (YAML,
/// `---`-separated, [`crate::policy::parse_policies`]), refused when one is
/// for a namespace outside `governed`, and every other namespace in
/// `governed` unclaimed (the file is the only policy object).
fn snapshot(bytes: &[u8], path: &Path, governed: &AllowedNamespaces) -> Result<Snapshot> {
    let policies =
        crate::policy::parse_policies(&String::from_utf8_lossy(bytes)).map_err(|error| {
            FileSourceError::Invalid {
                path: path.to_path_buf(),
                error,
            }
        })?;
    let outside = policies
        .iter()
        .find(|p| !governed.allows(&p.spec.target_namespace));
    if let Some(p) = outside {
        return Err(FileSourceError::NotGoverned {
            path: path.to_path_buf(),
            policy: p.name.clone(),
            namespace: p.spec.target_namespace.clone(),
            governed: governed.display(),
        });
    }
    let mut snapshot = Snapshot::from_policies(policies);
    snapshot.unclaimed = std::mem::take(&mut snapshot.unclaimed).within(governed);
    Ok(snapshot)
}

/// A policy file source.
pub struct FileSource {
    path: PathBuf,
    store: PolicyStore,
    metrics: Metrics,
    last: Option<Vec<u8>>,
    governed: AllowedNamespaces,
}

impl FileSource {
    /// Loads the file once and publishes it to `store`. An invalid or
    /// unreadable file at start is an error (the caller exits).
    pub fn start(path: PathBuf, store: PolicyStore, metrics: Metrics) -> Result<FileSource> {
        FileSource::start_governed(path, store, metrics, AllowedNamespaces::all())
    }

    /// [`FileSource::start`] with `--governed-namespaces`: a policy for
    /// another namespace is an error at start and refused on reload (the
    /// previous policy stays in force).
    pub fn start_governed(
        path: PathBuf,
        store: PolicyStore,
        metrics: Metrics,
        governed: AllowedNamespaces,
    ) -> Result<FileSource> {
        let bytes = read(&path)?;
        let snapshot = snapshot(&bytes, &path, &governed)?;
        let count = snapshot.policies.len();
        store.publish(snapshot);
        metrics.policy_reload(true);
        tracing::info!(path = %path.display(), policies = count, "loaded policy file");
        Ok(FileSource {
            path,
            store,
            metrics,
            last: Some(bytes),
            governed,
        })
    }

    /// Re-reads the file once. Returns `None` when the contents did not
    /// change, else whether the new contents were published.
    pub fn poll(&mut self) -> Option<Result<(), FileSourceError>> {
        let loaded = match read(&self.path) {
            // A missing file (e.g. mid symlink swap) keeps the old policy;
            // report it once.
            Err(err) => self.last.take().map(|_| Err(err))?,
            Ok(bytes) if self.last.as_deref() == Some(&bytes[..]) => return None,
            Ok(bytes) => snapshot(self.last.insert(bytes), &self.path, &self.governed),
        };
        match loaded {
            Ok(snapshot) => {
                let count = snapshot.policies.len();
                self.store.publish(snapshot);
                self.metrics.policy_reload(true);
                tracing::info!(path = %self.path.display(), policies = count, "reloaded policy file");
                Some(Ok(()))
            }
            Err(err) => {
                // The file now holds something that cannot be read as
                // policies, which may name any namespace: none is unclaimed.
                self.store.update(|s| Snapshot {
                    unclaimed: Unclaimed::Unknown,
                    ..s.clone()
                });
                self.metrics.policy_reload(false);
                let what = match err {
                    FileSourceError::Read { .. } => "policy file unreadable",
                    _ => "invalid policy file",
                };
                tracing::error!(error = %crate::errors::Chain(&err), "{what}; keeping the previous policy");
                Some(Err(err))
            }
        }
    }

    /// Polls every `interval` until the task is dropped.
    pub async fn watch(mut self, interval: Duration) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let polled = tokio::task::spawn_blocking(move || {
                let _ = self.poll();
                self
            });
            match polled.await {
                Ok(me) => self = me,
                Err(e) => {
                    tracing::error!(error = %e, "policy file watcher stopped");
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: &str = include_str!("../../examples/policy.yaml");

    #[test]
    fn start_rejects_invalid_and_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.yaml");
        std::fs::write(&path, "spec: {nope: 1}").unwrap();
        let err = FileSource::start(
            path.clone(),
            PolicyStore::default(),
            Metrics::unregistered(),
        )
        .err()
        .unwrap();
        assert!(err.to_string().contains("policy.yaml"), "{err}");
    }

    #[test]
    fn policy_outside_governed_namespaces_is_refused_at_start_and_on_reload() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.yaml");
        std::fs::write(&path, POLICY.replace("knative-serving", "default")).unwrap();
        let governed = AllowedNamespaces::only(["knative-serving"]);
        let err = FileSource::start_governed(
            path.clone(),
            PolicyStore::default(),
            Metrics::unregistered(),
            governed.clone(),
        )
        .err()
        .expect("refused");
        let text = err.to_string();
        assert!(
            text.contains("policy.yaml")
                && text.contains("\"default\"")
                && text.contains("--governed-namespaces (knative-serving)"),
            "{text}"
        );
        std::fs::write(&path, POLICY).unwrap();
        let store = PolicyStore::default();
        let mut src = FileSource::start_governed(
            path.clone(),
            store.clone(),
            Metrics::unregistered(),
            governed,
        )
        .unwrap();
        std::fs::write(&path, POLICY.replace("knative-serving", "default")).unwrap();
        assert!(matches!(
            src.poll(),
            Some(Err(FileSourceError::NotGoverned { .. }))
        ));
        assert!(store.load().policy_for("default").is_none());
        assert!(
            store.load().policy_for("knative-serving").is_some(),
            "old policy kept"
        );
    }

    #[test]
    fn reload_applies_valid_and_keeps_old_on_invalid() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.yaml");
        std::fs::write(&path, POLICY).unwrap();
        let store = PolicyStore::default();
        let mut src =
            FileSource::start(path.clone(), store.clone(), Metrics::unregistered()).unwrap();
        assert!(store.load().policy_for("knative-serving").is_some());
        assert!(src.poll().is_none(), "unchanged file is not reloaded");

        std::fs::write(&path, POLICY.replace("knative-serving", "other-ns")).unwrap();
        assert!(matches!(src.poll(), Some(Ok(()))));
        assert!(store.load().policy_for("other-ns").is_some());
        assert!(store.load().policy_for("knative-serving").is_none());

        // The file names other-ns only: knative-serving is unclaimed (its
        // records are undone at admission)...
        assert!(store.load().unclaimed("knative-serving"));
        std::fs::write(&path, "apiVersion: [").unwrap();
        assert!(matches!(src.poll(), Some(Err(_))));
        assert!(
            store.load().policy_for("other-ns").is_some(),
            "old policy kept"
        );
        // ...until the file cannot be read: it may name any namespace.
        assert!(!store.load().unclaimed("knative-serving"));
    }
}
