//! TLS: rustls server configuration and certificate reloading.
//!
//! The served [`ServerConfig`] lives in an `ArcSwapOption`; each new
//! connection takes the current one. [`TlsReloader::poll`] re-reads the
//! certificate, key (and client CA) *contents* (so the Kubernetes `..data`
//! symlink swap of a mounted Secret is seen like any other change) and
//! swaps in a new config only when the certificate chain and the key parse
//! and the key matches the leaf. Anything else keeps the old config.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Once};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::sign::{CertifiedKey, SingleCertAndKey};

use crate::telemetry::Metrics;

/// ALPN protocols offered, in order of preference.
pub const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("reading {path}")]
    Read {
        path: PathBuf,
        #[source]
        error: std::io::Error,
    },
    #[error("{what} {path}: no PEM {expected} found")]
    Empty {
        what: &'static str,
        path: PathBuf,
        expected: &'static str,
    },
    #[error("{what} {path}: bad PEM: {message}")]
    Pem {
        what: &'static str,
        path: PathBuf,
        message: String,
    },
    #[error("key {key} does not match the leaf certificate of {cert}: {message}")]
    Mismatch {
        cert: PathBuf,
        key: PathBuf,
        message: String,
    },
    #[error("building the TLS configuration")]
    Config(#[source] rustls::Error),
    #[error("building the TLS configuration: client CA {path}")]
    ClientCa {
        path: PathBuf,
        #[source]
        source: rustls::server::VerifierBuilderError,
    },
    #[error("writing {path}")]
    Write {
        path: PathBuf,
        #[source]
        error: std::io::Error,
    },
    #[error("generating a self-signed certificate")]
    Generate(#[source] rcgen::Error),
}

/// The result of this module's fallible functions.
pub type Result<T, E = TlsError> = std::result::Result<T, E>;

/// Installs rustls' `ring` provider as the process default (once; safe to
/// call from every test and entry point).
pub fn install_crypto_provider() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Parses a PEM certificate chain (leaf first).
pub fn parse_chain(pem: &[u8], path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            what: "certificate",
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Empty {
            what: "certificate",
            path: path.to_path_buf(),
            expected: "CERTIFICATE",
        });
    }
    Ok(certs)
}

/// Parses a PEM private key (PKCS#8, PKCS#1 or SEC1).
pub fn parse_key(pem: &[u8], path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::Empty {
            what: "key",
            path: path.to_path_buf(),
            expected: "PRIVATE KEY",
        },
        e => TlsError::Pem {
            what: "key",
            path: path.to_path_buf(),
            message: e.to_string(),
        },
    })
}

/// Builds a certified key, refusing a key that does not match the leaf.
pub fn certified_key(
    cert_pem: &[u8],
    key_pem: &[u8],
    cert_path: &Path,
    key_path: &Path,
) -> Result<CertifiedKey> {
    let chain = parse_chain(cert_pem, cert_path)?;
    let key = parse_key(key_pem, key_path)?;
    let mismatch = |message: String| TlsError::Mismatch {
        cert: cert_path.to_path_buf(),
        key: key_path.to_path_buf(),
        message,
    };
    let signing = provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| mismatch(format!("unusable key: {e}")))?;
    let ck = CertifiedKey::new(chain, signing);
    ck.keys_match().map_err(|e| mismatch(e.to_string()))?;
    Ok(ck)
}

/// notBefore and notAfter of a DER certificate, in Unix seconds.
pub fn validity(cert: &CertificateDer<'_>) -> Option<(i64, i64)> {
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref()).ok()?;
    let v = parsed.validity();
    Some((v.not_before.timestamp(), v.not_after.timestamp()))
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Builds a server config: TLS 1.2 + 1.3, ALPN h2 and http/1.1, and a
/// required, verified client certificate when `client_ca` is given.
pub fn server_config(key: CertifiedKey, client_ca: Option<(&[u8], &Path)>) -> Result<ServerConfig> {
    let builder = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .map_err(TlsError::Config)?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some((pem, path)) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in parse_chain(pem, path)? {
                roots.add(cert).map_err(|e| TlsError::Pem {
                    what: "client CA",
                    path: path.to_path_buf(),
                    message: e.to_string(),
                })?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                .build()
                .map_err(|source| TlsError::ClientCa {
                    path: path.to_path_buf(),
                    source,
                })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder.with_cert_resolver(Arc::new(SingleCertAndKey::from(key)));
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

/// Where the certificate comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TlsSource {
    /// PEM files, polled for changes.
    Files {
        cert: PathBuf,
        key: PathBuf,
        client_ca: Option<PathBuf>,
    },
    /// An in-memory CA + leaf for localhost, 127.0.0.1 and ::1; the CA
    /// certificate is written to `ca_out`.
    SelfSigned {
        ca_out: PathBuf,
        client_ca: Option<PathBuf>,
    },
}

/// A self-signed CA and a leaf signed by it, both PEM.
pub struct SelfSigned {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: String,
}

/// Generates a CA and a leaf for `names` (DNS names or IP addresses), valid
/// from a day ago to a year from now (a test or local server; the chart's
/// certificates come from cert-manager or `certs/`).
pub fn generate_self_signed(names: &[&str]) -> Result<SelfSigned> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let err = TlsError::Generate;
    let now = time::OffsetDateTime::now_utc();
    let params = |names: Vec<String>, common_name: &str| {
        let mut params = CertificateParams::new(names).map_err(err)?;
        params.not_before = now - time::Duration::days(1);
        params.not_after = now + time::Duration::days(365);
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        Ok::<_, TlsError>(params)
    };
    let ca_key = KeyPair::generate().map_err(err)?;
    let mut ca_params = params(Vec::new(), "knative-ha-webhook self-signed CA")?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).map_err(err)?;
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate().map_err(err)?;
    let leaf = params(
        names.iter().map(|s| s.to_string()).collect(),
        names.first().copied().unwrap_or("localhost"),
    )?
    .signed_by(&leaf_key, &issuer)
    .map_err(err)?;
    Ok(SelfSigned {
        ca_pem: ca_cert.pem(),
        cert_pem: leaf.pem(),
        key_pem: leaf_key.serialize_pem(),
    })
}

/// Writes `bytes` to `path` without following a link there: into a new file
/// beside it (created exclusively: never an existing file or link), renamed
/// over `path` (a rename replaces a symbolic link, it never writes through
/// one), so a link planted in a shared directory redirects nothing.
fn write_replacing(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let name = path
        .file_name()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "no file name"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|()| f.sync_all()));
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(())
}

/// Holds the served TLS configuration and reloads it from disk.
pub struct TlsReloader {
    source: TlsSource,
    /// The served config, and notBefore and notAfter of its leaf (Unix
    /// seconds; the widest range where they cannot be read).
    current: ArcSwapOption<(Arc<ServerConfig>, i64, i64)>,
    /// The last contents read of the certificate, key and client CA files.
    seen: std::sync::Mutex<Option<[Option<Vec<u8>>; 3]>>,
    metrics: Metrics,
}

impl TlsReloader {
    /// Creates the reloader and makes a first load attempt. For
    /// [`TlsSource::SelfSigned`] the certificate is generated here and the
    /// CA written out (an error is fatal); for files a failed first load is
    /// logged and retried by [`TlsReloader::poll`] (the server is not ready
    /// until it succeeds).
    pub fn new(source: TlsSource, metrics: Metrics) -> Result<Arc<TlsReloader>, TlsError> {
        install_crypto_provider();
        let reloader = Arc::new(TlsReloader {
            source: source.clone(),
            current: ArcSwapOption::empty(),
            seen: std::sync::Mutex::new(None),
            metrics,
        });
        match &source {
            TlsSource::SelfSigned { ca_out, client_ca } => {
                let generated = generate_self_signed(&["localhost", "127.0.0.1", "::1"])?;
                write_replacing(ca_out, generated.ca_pem.as_bytes()).map_err(|error| {
                    TlsError::Write {
                        path: ca_out.clone(),
                        error,
                    }
                })?;
                let key = certified_key(
                    generated.cert_pem.as_bytes(),
                    generated.key_pem.as_bytes(),
                    Path::new("<self-signed>"),
                    Path::new("<self-signed>"),
                )?;
                reloader.install(key, client_ca.as_deref())?;
                tracing::info!(ca = %ca_out.display(), "generated a self-signed certificate for localhost, 127.0.0.1 and ::1");
            }
            TlsSource::Files { .. } => {
                reloader.poll();
            }
        }
        Ok(reloader)
    }

    /// The config new connections should use; `None` until a certificate loaded.
    pub fn current(&self) -> Option<Arc<ServerConfig>> {
        self.current.load().as_ref().map(|c| c.0.clone())
    }

    /// True once a certificate is loaded and within its validity period
    /// now: an expired or not yet valid certificate makes the pod not Ready
    /// (the API server refuses the handshake; under `failurePolicy: Ignore`
    /// it would fail open unseen but for a gauge).
    pub fn has_certificate(&self) -> bool {
        let now = unix_now();
        self.current
            .load()
            .as_ref()
            .is_some_and(|c| c.1 <= now && now < c.2)
    }

    fn install(&self, key: CertifiedKey, client_ca: Option<&Path>) -> Result<()> {
        let ca = client_ca.map(read).transpose()?;
        let valid = key.end_entity_cert().ok().and_then(validity);
        let config = Arc::new(server_config(key, ca.as_deref().zip(client_ca))?);
        let (before, after) = valid.unwrap_or((i64::MIN, i64::MAX));
        self.current.store(Some(Arc::new((config, before, after))));
        if valid.is_some() {
            self.metrics.certificate_expiry.set(after as f64);
        }
        let now = unix_now();
        if now < before || after <= now {
            tracing::warn!(
                not_before = before,
                not_after = after,
                "the serving certificate is not valid now (expired, or not yet valid): not ready until a valid one is loaded"
            );
        }
        Ok(())
    }

    /// Re-reads the files; reloads when their contents changed. Returns
    /// `Some(result)` when a reload was attempted.
    pub fn poll(&self) -> Option<Result<()>> {
        let TlsSource::Files {
            cert,
            key,
            client_ca,
        } = &self.source
        else {
            return None;
        };
        let now = [Some(cert), Some(key), client_ca.as_ref()]
            .map(|path| path.and_then(|p| std::fs::read(p).ok()));
        {
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            if seen.as_ref() == Some(&now) {
                return None;
            }
            *seen = Some(now);
        }
        let result = self.load_files(cert, key, client_ca.as_deref());
        match &result {
            Ok(()) => {
                self.metrics.tls_reload(true);
                tracing::info!(cert = %cert.display(), key = %key.display(), "loaded TLS certificate");
            }
            Err(e) => {
                self.metrics.tls_reload(false);
                if self.has_certificate() {
                    tracing::error!(error = %e, "TLS reload failed; keeping the previous certificate");
                } else {
                    tracing::error!(error = %e, "TLS certificate not loaded; not ready");
                }
            }
        }
        Some(result)
    }

    fn load_files(&self, cert: &Path, key: &Path, ca: Option<&Path>) -> Result<()> {
        let ck = certified_key(&read(cert)?, &read(key)?, cert, key)?;
        self.install(ck, ca)
    }

    /// Polls every `interval` until the task is dropped.
    pub async fn watch(self: Arc<Self>, interval: Duration) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let me = self.clone();
            // File reads are blocking; keep them off the async workers.
            let _ = tokio::task::spawn_blocking(move || me.poll()).await;
        }
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|error| TlsError::Read {
        path: path.to_path_buf(),
        error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_signed_pair_matches_and_mismatched_pair_is_refused() {
        install_crypto_provider();
        let a = generate_self_signed(&["localhost"]).unwrap();
        let b = generate_self_signed(&["localhost"]).unwrap();
        let p = Path::new("x");
        assert!(certified_key(a.cert_pem.as_bytes(), a.key_pem.as_bytes(), p, p).is_ok());
        let err = certified_key(a.cert_pem.as_bytes(), b.key_pem.as_bytes(), p, p).unwrap_err();
        assert!(matches!(err, TlsError::Mismatch { .. }), "{err}");
        let half = &a.cert_pem.as_bytes()[..a.cert_pem.len() / 2];
        assert!(certified_key(half, a.key_pem.as_bytes(), p, p).is_err());
        assert!(certified_key(b"", a.key_pem.as_bytes(), p, p).is_err());
    }

    #[test]
    fn a_self_signed_certificate_is_valid_for_a_year_not_until_4096() {
        let a = generate_self_signed(&["localhost"]).unwrap();
        let chain = parse_chain(a.cert_pem.as_bytes(), Path::new("x")).unwrap();
        let (before, after) = validity(&chain[0]).unwrap();
        let now = unix_now();
        assert!(before <= now && now < after);
        // rcgen's default notAfter was 4096-01-01.
        let days = (after - now) / 86_400;
        assert!((364..=366).contains(&days), "{days} days");
    }

    /// A certificate and key valid from `before` to `after` (Unix seconds).
    fn certificate(before: i64, after: i64) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        let at = |t: i64| time::OffsetDateTime::from_unix_timestamp(t).unwrap();
        params.not_before = at(before);
        params.not_after = at(after);
        (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
    }

    #[test]
    fn an_expired_or_not_yet_valid_certificate_is_not_ready() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
        let day = 86_400;
        let now = unix_now();
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = crate::telemetry::Metrics::register(&mut registry);
        for (before, after, ready) in [
            (now - 10 * day, now + 10 * day, true),
            (now - 10 * day, now - 2 * day, false),
            (now + 2 * day, now + 10 * day, false),
        ] {
            let (c, k) = certificate(before, after);
            std::fs::write(&cert, c).unwrap();
            std::fs::write(&key, k).unwrap();
            let source = TlsSource::Files {
                cert: cert.clone(),
                key: key.clone(),
                client_ca: None,
            };
            let reloader = TlsReloader::new(source, metrics.clone()).unwrap();
            assert!(reloader.current().is_some(), "it loads");
            assert_eq!(reloader.has_certificate(), ready, "{before}..{after}");
        }
    }

    #[test]
    fn the_ca_is_never_written_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("victim");
        std::fs::write(&target, "keep").unwrap();
        let ca = dir.path().join("ca.pem");
        std::os::unix::fs::symlink(&target, &ca).unwrap();
        write_replacing(&ca, b"CA").unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
        assert_eq!(std::fs::read_to_string(&ca).unwrap(), "CA");
        assert!(
            !std::fs::symlink_metadata(&ca)
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }
}
