//! The process environment as an input of the configuration: environment
//! variables and the few files a pod's configuration lives in. The
//! configuration layer reads them only through [`Env`], so parsing is pure
//! and tests pass a [`MapEnv`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where the configuration looks things up.
pub trait Env {
    /// An environment variable (`None` when unset or not valid UTF-8).
    fn var(&self, key: &str) -> Option<String>;
    /// A file's text (`None` when it cannot be read).
    fn read_file(&self, path: &Path) -> Option<String>;
    /// True when `path` exists.
    fn exists(&self, path: &Path) -> bool;
    /// The user's home directory.
    fn home_dir(&self) -> Option<PathBuf> {
        self.var("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
    }
    /// This process's id (part of the Lease identity outside a pod).
    fn process_id(&self) -> u32;
}

/// The real environment of this process; used only by `main` and `cmd`.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, key: &str) -> Option<String> {
        std::env::var(key).ok()
    }

    fn read_file(&self, path: &Path) -> Option<String> {
        std::fs::read_to_string(path).ok()
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn home_dir(&self) -> Option<PathBuf> {
        std::env::home_dir()
    }

    fn process_id(&self) -> u32 {
        std::process::id()
    }
}

/// An environment given as maps (tests, embedding).
#[derive(Clone, Debug, Default)]
pub struct MapEnv {
    pub vars: BTreeMap<String, String>,
    pub files: BTreeMap<PathBuf, String>,
    pub pid: u32,
}

impl MapEnv {
    /// An empty environment: no variables, no files, process id 1.
    pub fn new() -> MapEnv {
        MapEnv {
            pid: 1,
            ..MapEnv::default()
        }
    }

    /// With the variable `key` set to `value`.
    pub fn with_var(mut self, key: &str, value: &str) -> MapEnv {
        self.vars.insert(key.to_string(), value.to_string());
        self
    }

    /// With the file `path` holding `text`.
    pub fn with_file(mut self, path: impl Into<PathBuf>, text: &str) -> MapEnv {
        self.files.insert(path.into(), text.to_string());
        self
    }
}

impl Env for MapEnv {
    fn var(&self, key: &str) -> Option<String> {
        self.vars.get(key).cloned()
    }

    fn read_file(&self, path: &Path) -> Option<String> {
        self.files.get(path).cloned()
    }

    fn exists(&self, path: &Path) -> bool {
        self.files.contains_key(path)
    }

    fn process_id(&self) -> u32 {
        self.pid
    }
}
