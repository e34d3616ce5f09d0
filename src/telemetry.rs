//! Metrics and logging.
