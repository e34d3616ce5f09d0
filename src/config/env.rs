//! The process environment as an input of the configuration: variables and
//! the few files a pod's configuration lives in, read only through [`Env`]
//! so that parsing is pure and tests pass environments of their own.

use std::path::{Path, PathBuf};

pub trait Env {
    /// An environment variable (`None` when unset or not valid UTF-8).
    fn var(&self, key: &str) -> Option<String>;
    /// A file's text (`None` when it cannot be read).
    fn read_file(&self, path: &Path) -> Option<String>;
    fn exists(&self, path: &Path) -> bool;
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
