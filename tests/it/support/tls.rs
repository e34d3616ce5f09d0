//! Test support for the server and TLS tests: a per-test PKI (rcgen), a
//! Kubernetes-style Secret volume (`..data` symlink swap), HTTPS clients
//! that verify the server as `knative-ha-webhook.knative-ha.svc` and an
//! in-process server handle.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::support::example_policy_path;
use std::time::Duration;

use knative_ha_webhook::app::{App, Config, PolicySource};
use knative_ha_webhook::store::PolicyStore;
use knative_ha_webhook::tls::TlsSource;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};

/// The service DNS name clients use for SNI and verification.
pub const SVC: &str = "knative-ha-webhook.knative-ha.svc";

/// A throw-away certificate authority.
pub struct Pki {
    pub ca_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

/// A PEM certificate (chain) and key.
#[derive(Clone)]
pub struct Pair {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Pki {
    pub fn new(name: &str) -> Pki {
        knative_ha_webhook::tls::install_crypto_provider();
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).unwrap();
        Pki {
            ca_pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A leaf for `names` signed by this CA, tagged with `serial` in its CN
    /// so tests can tell certificates apart.
    pub fn leaf(&self, names: &[&str], cn: &str) -> Pair {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Pair {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// A leaf whose key is the given PKCS#8 PEM key (e.g. an RSA key).
    pub fn leaf_with_key(&self, names: &[&str], cn: &str, pkcs8_pem: &str) -> String {
        let key = KeyPair::from_pem(pkcs8_pem).unwrap();
        let mut params =
            CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.signed_by(&key, &self.issuer).unwrap().pem()
    }

    /// An intermediate CA signed by this one: its PEM and the intermediate.
    pub fn intermediate(&self, name: &str) -> (String, Pki) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let pem = cert.pem();
        (
            pem.clone(),
            Pki {
                ca_pem: pem,
                issuer: Issuer::new(params, key),
            },
        )
    }

    /// A server leaf for the service name, localhost and 127.0.0.1.
    pub fn server_leaf(&self, cn: &str) -> Pair {
        self.leaf(&[SVC, "localhost", "127.0.0.1"], cn)
    }
}

/// A directory laid out like a mounted Kubernetes Secret:
/// `tls.crt -> ..data/tls.crt`, `..data -> ..<timestamp>/`.
pub struct SecretDir {
    pub dir: tempfile::TempDir,
    generation: u32,
}

impl SecretDir {
    pub fn new(pair: &Pair) -> SecretDir {
        let dir = tempfile::tempdir().unwrap();
        let mut s = SecretDir { dir, generation: 0 };
        s.swap(pair);
        std::os::unix::fs::symlink("..data/tls.crt", s.dir.path().join("tls.crt")).unwrap();
        std::os::unix::fs::symlink("..data/tls.key", s.dir.path().join("tls.key")).unwrap();
        s
    }

    pub fn cert(&self) -> PathBuf {
        self.dir.path().join("tls.crt")
    }

    pub fn key(&self) -> PathBuf {
        self.dir.path().join("tls.key")
    }

    pub fn source(&self) -> TlsSource {
        TlsSource::Files {
            cert: self.cert(),
            key: self.key(),
            client_ca: None,
        }
    }

    /// Writes the files into a new timestamped directory and atomically
    /// renames a new `..data` symlink over the old one (what the kubelet does).
    pub fn swap(&mut self, pair: &Pair) {
        self.swap_raw(pair.cert_pem.as_bytes(), pair.key_pem.as_bytes());
    }

    pub fn swap_raw(&mut self, cert: &[u8], key: &[u8]) {
        self.generation += 1;
        let root = self.dir.path();
        let ts = format!("..2026_12_02_10_00_00.{:04}", self.generation);
        std::fs::create_dir(root.join(&ts)).unwrap();
        std::fs::write(root.join(&ts).join("tls.crt"), cert).unwrap();
        std::fs::write(root.join(&ts).join("tls.key"), key).unwrap();
        let tmp = root.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&ts, &tmp).unwrap();
        let old = std::fs::read_link(root.join("..data")).ok();
        std::fs::rename(&tmp, root.join("..data")).unwrap();
        if let Some(old) = old {
            let _ = std::fs::remove_dir_all(root.join(old));
        }
    }
}

/// A test key from `tests/it/support/keys/`.
pub fn test_key(name: &str) -> String {
    std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/it/support/keys")
            .join(name),
    )
    .unwrap()
}

/// The CN of the certificate the server presented on `resp`'s connection.
pub fn peer_cn(resp: &reqwest::Response) -> String {
    let info = resp
        .extensions()
        .get::<reqwest::tls::TlsInfo>()
        .expect("client built with tls_info(true)");
    let der = info.peer_certificate().expect("server certificate");
    let (_, cert) = x509_parser::parse_x509_certificate(der).unwrap();
    cert.subject()
        .iter_common_name()
        .next()
        .and_then(|cn| cn.as_str().ok())
        .unwrap_or_default()
        .to_string()
}

/// A client that opens a new connection (new handshake) for every request
/// and records the server certificate.
pub fn fresh_client(ca_pem: &str, addr: SocketAddr) -> reqwest::Client {
    knative_ha_webhook::tls::install_crypto_provider();
    reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap())
        .resolve(SVC, addr)
        .pool_max_idle_per_host(0)
        .tls_info(true)
        .http1_only()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap()
}

/// Which HTTP version the client may negotiate (by ALPN).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Http1,
    /// Offers h2 and http/1.1 by ALPN; the server picks h2.
    H2,
}

/// An HTTPS client trusting only `ca_pem` and resolving [`SVC`] to `addr`.
pub fn client(
    ca_pem: &str,
    addr: SocketAddr,
    proto: Proto,
    identity: Option<&Pair>,
) -> reqwest::Client {
    knative_ha_webhook::tls::install_crypto_provider();
    let mut b = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap())
        .resolve(SVC, addr)
        .timeout(Duration::from_secs(20));
    if proto == Proto::Http1 {
        b = b.http1_only();
    }
    if let Some(id) = identity {
        let pem = format!("{}{}", id.cert_pem, id.key_pem);
        b = b.identity(reqwest::Identity::from_pem(pem.as_bytes()).unwrap());
    }
    b.build().unwrap()
}

/// The `/mutate` URL on the service name (port from `addr`).
pub fn mutate_url(addr: SocketAddr) -> String {
    format!("https://{SVC}:{}/mutate", addr.port())
}

/// A plain HTTP client for the metrics listener.
pub fn plain_client() -> reqwest::Client {
    knative_ha_webhook::tls::install_crypto_provider();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

pub async fn get_status(metrics_addr: SocketAddr, path: &str) -> (u16, String) {
    let resp = plain_client()
        .get(format!("http://{metrics_addr}{path}"))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap())
}

pub async fn metrics_text(metrics_addr: SocketAddr) -> String {
    get_status(metrics_addr, "/metrics").await.1
}

/// The value of the sample named exactly `series` (name + labels as
/// printed), if present.
pub fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok())?
    })
}

/// A server running in this process.
pub struct Running {
    pub addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    pub store: PolicyStore,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    pub handle: tokio::task::JoinHandle<Result<(), knative_ha_webhook::app::AppError>>,
}

impl Running {
    pub async fn start(config: Config) -> Running {
        let server = App::bind(config, None).await.unwrap();
        let addr = server.local_addr();
        let metrics_addr = server.metrics_addr();
        let store = server.store();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let handle = tokio::spawn(server.run(async move {
            let _ = rx.await;
        }));
        Running {
            addr,
            metrics_addr,
            store,
            stop: Some(tx),
            handle,
        }
    }

    /// Signals shutdown (like SIGTERM) without waiting.
    pub fn begin_shutdown(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }

    /// Shuts down and waits for `run` to return.
    pub async fn stop(mut self) {
        self.begin_shutdown();
        tokio::time::timeout(Duration::from_secs(60), self.handle)
            .await
            .expect("server stops within 60 s")
            .unwrap()
            .unwrap();
    }
}

/// A server on `examples/policy.yaml` with a fresh PKI and a Secret-style
/// certificate directory.
pub struct Fixture {
    pub pki: Pki,
    pub secret: SecretDir,
    pub server: Running,
}

impl Fixture {
    pub async fn start() -> Fixture {
        Fixture::start_with(|_| {}).await
    }

    pub async fn start_with(tweak: impl FnOnce(&mut Config)) -> Fixture {
        let pki = Pki::new("test CA");
        let secret = SecretDir::new(&pki.server_leaf("server-1"));
        let mut config =
            Config::for_tests(secret.source(), PolicySource::File(example_policy_path()));
        tweak(&mut config);
        let server = Running::start(config).await;
        Fixture {
            pki,
            secret,
            server,
        }
    }

    pub fn client(&self, proto: Proto) -> reqwest::Client {
        client(&self.pki.ca_pem, self.server.addr, proto, None)
    }

    pub fn url(&self) -> String {
        mutate_url(self.server.addr)
    }
}

/// A raw TLS connection to the server (HTTP/1.1 by hand), verifying it as [`SVC`].
pub async fn raw_tls(
    ca_pem: &str,
    addr: SocketAddr,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    raw_tls_alpn(ca_pem, addr, b"http/1.1").await
}

/// A raw TLS connection offering only `alpn` (e.g. `b"h2"` for frames by hand).
pub async fn raw_tls_alpn(
    ca_pem: &str,
    addr: SocketAddr,
    alpn: &[u8],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    knative_ha_webhook::tls::install_crypto_provider();
    let mut roots = rustls::RootCertStore::empty();
    for c in knative_ha_webhook::tls::parse_chain(ca_pem.as_bytes(), Path::new("ca")).unwrap() {
        roots.add(c).unwrap();
    }
    let mut config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![alpn.to_vec()];
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    connector
        .connect(SVC.try_into().unwrap(), tcp)
        .await
        .unwrap()
}
