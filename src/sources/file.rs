//! Policy from a file, re-read when it changes.
