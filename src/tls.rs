//! TLS: rustls server configuration and certificate reloading.
