//! A fake Kubernetes API server for the integration tests (and
//! `examples/fakeapi_bench.rs`).
//!
//! It speaks the real wire format over real HTTP on 127.0.0.1 (plain http),
//! for any group/version/resource registered with it, namespaced or
//! cluster-scoped, from an in-memory store of JSON objects:
//!
//! - discovery (`/api`, `/apis`, `/api/v1`, `/apis/G/V`);
//! - LIST with `labelSelector` (equality-based: `k=v`, `k==v`, `k!=v`, `k`,
//!   `!k`), `fieldSelector` (`path=value`, `path!=value` on any dotted path,
//!   e.g. `metadata.name`), `limit`/`continue`, returning
//!   `{"kind":"XList","apiVersion":..,"metadata":{"resourceVersion":"N"},"items":[..]}`;
//! - WATCH (`?watch=true&resourceVersion=N&allowWatchBookmarks=true&timeoutSeconds=S`)
//!   as a chunked stream of newline-delimited `{"type":..,"object":..}`
//!   events from an event log with a global resourceVersion counter;
//!   objects moving in/out of a label selection become ADDED/DELETED like the
//!   real API server; periodic BOOKMARKs; a resourceVersion older than the
//!   compaction point gets an ERROR event with a `410 Expired` Status;
//! - GET/POST/PUT/PATCH (merge, strategic-merge treated as merge, JSON
//!   patch, apply treated as merge)/DELETE on objects and on `/status`, with
//!   uid, creationTimestamp, resourceVersion (optimistic concurrency on PUT)
//!   and generation bookkeeping (generation increments when anything but
//!   metadata and status changes, on objects that have a `spec`);
//! - switches for tests: a resource "not installed" (404), lists failing or
//!   held, verbs forbidden (403) in one namespace, dropping every open watch, expiring them with 410, stopping and
//!   restarting the server on the same port (the store survives, like etcd),
//!   answering every request `503` while "unavailable" (the requests are
//!   still recorded, so tests can count retries);
//! - status-only writes as a controller makes them ([`FakeApi::update_status`]:
//!   only `status` and the resourceVersion change).
//!
//! Test helpers write straight into the store through the same bookkeeping
//! as the HTTP handlers (as `kubectl` would through the API server).
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use futures::SinkExt;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

mod control;
mod http;
mod selectors;
mod store;
mod watches;

use http::*;
use selectors::*;
use watches::*;

/// How often an open watch sends a BOOKMARK when bookmarks are allowed.
pub const BOOKMARK_EVERY: Duration = Duration::from_millis(500);

/// One API resource the fake serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceDef {
    /// API group (`""` for core).
    pub group: String,
    pub version: String,
    /// Plural resource name (`configmaps`).
    pub plural: String,
    pub kind: String,
    pub namespaced: bool,
    /// Whether `/status` is a subresource (then writes to the main resource
    /// never change `status`, and `/status` writes change only `status`).
    pub status_subresource: bool,
}

impl ResourceDef {
    pub fn new(
        group: &str,
        version: &str,
        plural: &str,
        kind: &str,
        namespaced: bool,
        status_subresource: bool,
    ) -> ResourceDef {
        ResourceDef {
            group: group.into(),
            version: version.into(),
            plural: plural.into(),
            kind: kind.into(),
            namespaced,
            status_subresource,
        }
    }

    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    fn key(&self) -> ResKey {
        (self.group.clone(), self.plural.clone())
    }

    /// The store key of one object (cluster-scoped resources ignore `namespace`).
    fn obj_key(&self, namespace: &str, name: &str) -> ObjKey {
        let ns = if self.namespaced { namespace } else { "" };
        (
            self.group.clone(),
            self.plural.clone(),
            ns.to_string(),
            name.to_string(),
        )
    }

    /// The API server's 404 for a missing object of this resource.
    fn not_found(&self, name: &str) -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", self.plural),
        )
    }
}

/// The resources registered by [`FakeApi::start`]: those of every kind the
/// engine governs and the reconciler lists (as a real API server serves
/// them: `engine::kinds::KINDS`; a ConfigMap has no status), and the others
/// the tests use.
pub fn default_resources() -> Vec<ResourceDef> {
    use knative_ha_webhook::engine::{Kind, kinds::KINDS};
    let governed = KINDS.iter().filter(|k| k.listed).map(|k| {
        let status = k.kind != Kind::ConfigMap;
        ResourceDef::new(k.group, k.version, k.plural, k.resource_kind, true, status)
    });
    let mut resources = vec![
        ResourceDef::new("", "v1", "events", "Event", true, false),
        ResourceDef::new("", "v1", "namespaces", "Namespace", false, true),
        ResourceDef::new("events.k8s.io", "v1", "events", "Event", true, false),
        ResourceDef::new("coordination.k8s.io", "v1", "leases", "Lease", true, false),
        ResourceDef::new(
            "knativeha.dev",
            "v1alpha1",
            "highavailabilitypolicies",
            "HighAvailabilityPolicy",
            false,
            true,
        ),
    ];
    resources.extend(governed);
    resources
}

/// (group, plural).
type ResKey = (String, String);
/// (group, plural, namespace or "", name).
type ObjKey = (String, String, String, String);

#[derive(Clone, Debug)]
struct LogEntry {
    rv: u64,
    res: ResKey,
    namespace: String,
    kind: &'static str,
    old: Option<Value>,
    object: Value,
}

/// One request the fake served (for assertions).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub query: String,
}

#[derive(Debug, Default)]
struct Store {
    rv: u64,
    uid: u64,
    clock: i64,
    resources: Vec<ResourceDef>,
    uninstalled: HashSet<ResKey>,
    objects: BTreeMap<ObjKey, Value>,
    log: Vec<LogEntry>,
    /// Watches from a resourceVersion below this get 410 Gone.
    compacted: u64,
    /// Per resource: status codes the next lists answer with.
    list_failures: HashMap<ResKey, Vec<u16>>,
    /// Lists of these resources wait until released.
    held_lists: HashSet<ResKey>,
    /// Per (method, path): status codes the next such requests answer with.
    failures: HashMap<(String, String), Vec<u16>>,
    /// Every request answers 503 (an API server that is up but unusable).
    unavailable: bool,
    /// Per namespace: the verbs (`list`, `get`, `patch`, ...) answered with
    /// 403 Forbidden, as RBAC answers a service account without the rights.
    forbidden: HashMap<String, HashSet<String>>,
    requests: Vec<Request>,
    /// Concurrent writers: applied just before the next PATCH of the object.
    interfere: Vec<(ObjKey, Interference)>,
}

/// An edit the fake applies right before the next PATCH of one object, as
/// a concurrent writer between a client's read and its write would.
struct Interference(Box<dyn FnOnce(&mut Value) + Send>);

impl std::fmt::Debug for Interference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Interference")
    }
}

/// Why a write failed (mapped onto a Kubernetes Status).
#[derive(Debug)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
        }
    }
}

struct Shared {
    store: Mutex<Store>,
    /// The latest resourceVersion; watches wake up on change.
    changed: watch::Sender<u64>,
    /// (generation, send 410 before closing): bumping it ends every watch.
    kill: watch::Sender<(u64, bool)>,
    /// Bumped when held lists are released.
    released: watch::Sender<u64>,
}

impl Shared {
    fn with_store<T>(&self, f: impl FnOnce(&mut Store) -> T) -> T {
        let mut store = self.store.lock().expect("fake api store poisoned");
        let before = store.rv;
        let out = f(&mut store);
        let after = store.rv;
        drop(store);
        if after != before {
            self.changed.send_replace(after);
        }
        out
    }
}

/// The fake API server. Dropping it stops the server.
pub struct FakeApi {
    shared: Arc<Shared>,
    port: u16,
    server: Mutex<Option<JoinHandle<()>>>,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Drop for FakeApi {
    fn drop(&mut self) {
        if let Some(h) = self.server.lock().expect("server handle").take() {
            h.abort();
        }
        self.shared.kill.send_modify(|k| *k = (k.0 + 1, false));
    }
}

async fn bind(port: u16) -> std::io::Result<TcpListener> {
    let socket = TcpSocket::new_v4()?;
    socket.set_reuseaddr(true)?;
    socket.bind(std::net::SocketAddr::from(([127, 0, 0, 1], port)))?;
    socket.listen(128)
}

async fn serve(listener: TcpListener, router: Router) {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use tower::ServiceExt;
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let router = router.clone();
                conns.spawn(async move {
                    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        router.clone().oneshot(req)
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

impl FakeApi {
    /// Starts a fake API server with [`default_resources`] on a free port.
    pub async fn start() -> FakeApi {
        let (changed, _) = watch::channel(0);
        let (kill, _) = watch::channel((0, false));
        let (released, _) = watch::channel(0);
        let shared = Arc::new(Shared {
            store: Mutex::new(Store {
                resources: default_resources(),
                ..Store::default()
            }),
            changed,
            kill,
            released,
        });
        let listener = bind(0).await.expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local addr").port();
        let dir = tempfile::tempdir().expect("tempdir");
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(
            &kubeconfig,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://127.0.0.1:{port}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: fake\n    namespace: default\ncurrent-context: fake\nusers:\n- name: fake\n  user:\n    token: fake-token\n"
            ),
        )
        .expect("write kubeconfig");
        let api = FakeApi {
            shared,
            port,
            server: Mutex::new(None),
            dir,
            kubeconfig,
        };
        api.spawn_server(listener);
        api
    }

    fn spawn_server(&self, listener: TcpListener) {
        let router = Router::new()
            .fallback(handle)
            .with_state(self.shared.clone());
        let handle = tokio::spawn(serve(listener, router));
        *self.server.lock().expect("server handle") = Some(handle);
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The kubeconfig file pointing at this server.
    pub fn kubeconfig_path(&self) -> &std::path::Path {
        &self.kubeconfig
    }

    /// A kube client built from the kubeconfig file.
    pub async fn client(&self) -> kube::Client {
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig).expect("read kubeconfig");
        let config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .expect("kube config from kubeconfig");
        kube::Client::try_from(config).expect("kube client")
    }

    /// Stops the server: every open connection is closed and new ones are
    /// refused. The store survives.
    pub async fn stop(&self) {
        let handle = self.server.lock().expect("server handle").take();
        self.shared.kill.send_modify(|k| *k = (k.0 + 1, false));
        if let Some(h) = handle {
            h.abort();
            let _ = h.await;
        }
    }

    /// Starts the server again on the same port (after [`FakeApi::stop`]).
    pub async fn restart(&self) {
        let mut last = None;
        for _ in 0..200 {
            match bind(self.port).await {
                Ok(listener) => {
                    self.spawn_server(listener);
                    return;
                }
                Err(e) => last = Some(e),
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("could not re-bind 127.0.0.1:{}: {last:?}", self.port);
    }
}
