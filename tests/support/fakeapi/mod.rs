//! A fake Kubernetes API server for integration tests, pulled by the tests
//! that need it with `#[path = "support/fakeapi/mod.rs"] mod fakeapi;`.
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
//!   held, dropping every open watch, expiring them with 410, stopping and
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

/// The resources registered by [`FakeApi::start`].
pub fn default_resources() -> Vec<ResourceDef> {
    vec![
        ResourceDef::new("", "v1", "configmaps", "ConfigMap", true, false),
        ResourceDef::new("", "v1", "events", "Event", true, false),
        ResourceDef::new("", "v1", "namespaces", "Namespace", false, true),
        ResourceDef::new("events.k8s.io", "v1", "events", "Event", true, false),
        ResourceDef::new("apps", "v1", "deployments", "Deployment", true, true),
        ResourceDef::new(
            "autoscaling",
            "v2",
            "horizontalpodautoscalers",
            "HorizontalPodAutoscaler",
            true,
            true,
        ),
        ResourceDef::new(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            true,
            true,
        ),
        ResourceDef::new("coordination.k8s.io", "v1", "leases", "Lease", true, false),
        ResourceDef::new(
            "knativeha.dev",
            "v1alpha1",
            "highavailabilitypolicies",
            "HighAvailabilityPolicy",
            false,
            true,
        ),
    ]
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

fn now_string(clock: i64) -> String {
    // A fake clock: each creation is one second after the previous one,
    // so "oldest" is deterministic.
    k8s_openapi::jiff::Timestamp::from_second(1_767_225_600 + clock)
        .unwrap()
        .to_string()
}

fn has_content_change(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(o) = v.as_object_mut() {
            o.remove("metadata");
            o.remove("status");
        }
        v
    };
    strip(old) != strip(new)
}

impl Store {
    fn resource(&self, group: &str, plural: &str) -> Option<&ResourceDef> {
        self.resources
            .iter()
            .find(|r| r.group == group && r.plural == plural)
    }

    fn installed(&self, group: &str, plural: &str) -> Option<ResourceDef> {
        let r = self.resource(group, plural)?;
        if self.uninstalled.contains(&r.key()) {
            return None;
        }
        Some(r.clone())
    }

    fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn record(&mut self, res: &ResourceDef, kind: &'static str, old: Option<Value>, object: Value) {
        let namespace = object["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        self.log.push(LogEntry {
            rv: self.rv,
            res: res.key(),
            namespace,
            kind,
            old,
            object,
        });
    }

    fn create(
        &mut self,
        res: &ResourceDef,
        namespace: &str,
        mut obj: Value,
        honour_timestamp: bool,
    ) -> Result<Value, ApiError> {
        if !obj.is_object() {
            return Err(ApiError::new(400, "BadRequest", "body is not an object"));
        }
        if !obj.get("metadata").is_some_and(Value::is_object) {
            obj["metadata"] = json!({});
        }
        let mut name = obj["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if name.is_empty() {
            let Some(prefix) = obj["metadata"]["generateName"].as_str() else {
                return Err(ApiError::new(
                    422,
                    "Invalid",
                    "metadata.name: Required value",
                ));
            };
            name = format!("{prefix}{:05x}", self.uid + 1);
        }
        let ns = if res.namespaced {
            let from_body = obj["metadata"]["namespace"].as_str().unwrap_or_default();
            let ns = if namespace.is_empty() {
                from_body
            } else {
                namespace
            };
            if ns.is_empty() {
                return Err(ApiError::new(
                    400,
                    "BadRequest",
                    "a namespaced resource needs a namespace",
                ));
            }
            ns.to_string()
        } else {
            String::new()
        };
        let key = res.obj_key(&ns, &name);
        if self.objects.contains_key(&key) {
            return Err(ApiError::new(
                409,
                "AlreadyExists",
                format!("{} \"{name}\" already exists", res.plural),
            ));
        }
        self.uid += 1;
        self.clock += 1;
        let rv = self.next_rv();
        let meta = obj["metadata"].as_object_mut().expect("object");
        meta.insert("name".into(), json!(name));
        if res.namespaced {
            meta.insert("namespace".into(), json!(ns));
        } else {
            meta.remove("namespace");
        }
        meta.insert("uid".into(), json!(format!("uid-{}", self.uid)));
        meta.insert("resourceVersion".into(), json!(rv.to_string()));
        if !(honour_timestamp && meta.contains_key("creationTimestamp")) {
            meta.insert("creationTimestamp".into(), json!(now_string(self.clock)));
        }
        if obj.get("spec").is_some() {
            obj["metadata"]["generation"] = json!(1);
        }
        obj["apiVersion"] = json!(res.api_version());
        obj["kind"] = json!(res.kind);
        if res.status_subresource
            && let Some(o) = obj.as_object_mut()
        {
            o.remove("status");
        }
        self.objects.insert(key, obj.clone());
        self.record(res, "ADDED", None, obj.clone());
        Ok(obj)
    }

    /// Replaces an object (main resource or `/status`) with bookkeeping.
    fn replace(
        &mut self,
        res: &ResourceDef,
        namespace: &str,
        name: &str,
        mut new: Value,
        status_only: bool,
        check_rv: bool,
    ) -> Result<Value, ApiError> {
        let key = res.obj_key(namespace, name);
        let Some(old) = self.objects.get(&key).cloned() else {
            return Err(res.not_found(name));
        };
        if !new.is_object() {
            return Err(ApiError::new(400, "BadRequest", "body is not an object"));
        }
        let old_rv = old["metadata"]["resourceVersion"].as_str().unwrap_or("");
        let given = new["metadata"]["resourceVersion"].as_str().unwrap_or("");
        if check_rv && !given.is_empty() && given != old_rv {
            return Err(ApiError::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                    res.plural
                ),
            ));
        }
        if status_only {
            let status = new.get("status").cloned();
            new = old.clone();
            match status {
                Some(s) => new["status"] = s,
                None => {
                    new.as_object_mut().expect("object").remove("status");
                }
            }
        } else if res.status_subresource {
            match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    new.as_object_mut().expect("object").remove("status");
                }
            }
        }
        // Server-owned metadata.
        if !new.get("metadata").is_some_and(Value::is_object) {
            new["metadata"] = json!({});
        }
        for field in [
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "generation",
        ] {
            match old["metadata"].get(field) {
                Some(v) => new["metadata"][field] = v.clone(),
                None => {
                    new["metadata"]
                        .as_object_mut()
                        .expect("object")
                        .remove(field);
                }
            }
        }
        if new == old {
            // No-op writes do not bump the resourceVersion.
            return Ok(old);
        }
        if has_content_change(&old, &new) {
            let generation = old["metadata"]["generation"].as_i64().unwrap_or(0);
            if new.get("spec").is_some() {
                new["metadata"]["generation"] = json!(generation + 1);
            }
        }
        new["apiVersion"] = json!(res.api_version());
        new["kind"] = json!(res.kind);
        let rv = self.next_rv();
        new["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.objects.insert(key, new.clone());
        self.record(res, "MODIFIED", Some(old), new.clone());
        Ok(new)
    }

    fn patch(
        &mut self,
        res: &ResourceDef,
        namespace: &str,
        name: &str,
        content_type: &str,
        body: &[u8],
        status_only: bool,
    ) -> Result<Value, ApiError> {
        let key = res.obj_key(namespace, name);
        let Some(old) = self.objects.get(&key).cloned() else {
            return Err(res.not_found(name));
        };
        let mut doc = old.clone();
        if content_type.starts_with("application/json-patch+json") {
            let patch: json_patch::Patch = serde_json::from_slice(body)
                .map_err(|e| ApiError::new(400, "BadRequest", format!("json patch: {e}")))?;
            json_patch::patch(&mut doc, &patch)
                .map_err(|e| ApiError::new(422, "Invalid", format!("json patch: {e}")))?;
        } else if content_type.starts_with("application/merge-patch+json")
            || content_type.starts_with("application/strategic-merge-patch+json")
            || content_type.starts_with("application/apply-patch")
        {
            let patch: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::new(400, "BadRequest", format!("merge patch: {e}")))?;
            json_patch::merge(&mut doc, &patch);
        } else {
            return Err(ApiError::new(
                415,
                "UnsupportedMediaType",
                format!("unsupported patch content type {content_type:?}"),
            ));
        }
        // A patch that sets metadata.resourceVersion is a precondition.
        let check_rv = doc["metadata"]["resourceVersion"] != old["metadata"]["resourceVersion"];
        self.replace(res, namespace, name, doc, status_only, check_rv)
    }

    fn delete(
        &mut self,
        res: &ResourceDef,
        namespace: &str,
        name: &str,
    ) -> Result<Value, ApiError> {
        let Some(mut old) = self.objects.remove(&res.obj_key(namespace, name)) else {
            return Err(res.not_found(name));
        };
        let prev = old.clone();
        let rv = self.next_rv();
        old["metadata"]["resourceVersion"] = json!(rv.to_string());
        self.record(res, "DELETED", Some(prev), old.clone());
        Ok(old)
    }

    fn matching<'a>(
        &'a self,
        res: &ResourceDef,
        namespace: &'a str,
        selectors: &'a Selectors,
    ) -> impl Iterator<Item = &'a Value> + 'a {
        let res = res.key();
        self.objects
            .iter()
            .filter(move |((g, p, ns, _), _)| {
                *g == res.0 && *p == res.1 && (namespace.is_empty() || ns == namespace)
            })
            .map(|(_, v)| v)
            .filter(move |v| selectors.matches(v))
    }
}

/// Label and field selectors of a list or watch.
#[derive(Clone, Debug, Default)]
struct Selectors {
    labels: Vec<(String, Op, String)>,
    fields: Vec<(String, Op, String)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Exists,
    NotExists,
}

fn parse_selector(s: &str) -> Vec<(String, Op, String)> {
    s.split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| {
            if let Some((k, v)) = t.split_once("!=") {
                (k.trim().into(), Op::Ne, v.trim().into())
            } else if let Some((k, v)) = t.split_once("==") {
                (k.trim().into(), Op::Eq, v.trim().into())
            } else if let Some((k, v)) = t.split_once('=') {
                (k.trim().into(), Op::Eq, v.trim().into())
            } else if let Some(k) = t.strip_prefix('!') {
                (k.trim().into(), Op::NotExists, String::new())
            } else {
                (t.into(), Op::Exists, String::new())
            }
        })
        .collect()
}

impl Selectors {
    fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        let label_ok = self.labels.iter().all(|(k, op, v)| {
            let got = labels.get(k).and_then(Value::as_str);
            match op {
                Op::Eq => got == Some(v.as_str()),
                Op::Ne => got != Some(v.as_str()),
                Op::Exists => got.is_some(),
                Op::NotExists => got.is_none(),
            }
        });
        let field_ok = self.fields.iter().all(|(path, op, v)| {
            let mut cur = obj;
            for part in path.split('.') {
                cur = &cur[part];
            }
            let got = match cur {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            match op {
                Op::Eq => got == *v,
                Op::Ne => got != *v,
                Op::Exists => !cur.is_null(),
                Op::NotExists => cur.is_null(),
            }
        });
        label_ok && field_ok
    }
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parse_query(q: Option<&str>) -> HashMap<String, String> {
    q.unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn json_response(code: u16, body: &Value) -> Response {
    (
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn status_value(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code,
    })
}

fn error_response(e: ApiError) -> Response {
    json_response(e.code, &status_value(e.code, e.reason, &e.message))
}

fn not_found_resource() -> Response {
    json_response(
        404,
        &status_value(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ),
    )
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

    /// Registers one more resource.
    pub fn register(&self, def: ResourceDef) {
        self.shared.with_store(|s| {
            s.resources.retain(|r| r.key() != def.key());
            s.resources.push(def);
        });
    }

    /// Installs or uninstalls a resource (uninstalled: 404 everywhere, like
    /// a CRD that is not there).
    pub fn set_installed(&self, group: &str, plural: &str, installed: bool) {
        self.shared.with_store(|s| {
            let key = (group.to_string(), plural.to_string());
            if installed {
                s.uninstalled.remove(&key);
            } else {
                s.uninstalled.insert(key);
            }
        });
    }

    /// The next `codes.len()` lists of this resource answer with these
    /// HTTP status codes (e.g. 500).
    pub fn fail_lists(&self, group: &str, plural: &str, codes: &[u16]) {
        self.shared.with_store(|s| {
            s.list_failures.insert(
                (group.into(), plural.into()),
                codes.iter().rev().copied().collect(),
            );
        });
    }

    /// The next `codes.len()` requests with this method and exact path
    /// answer with these HTTP status codes (any verb, any path).
    pub fn fail_next(&self, method: &str, path: &str, codes: &[u16]) {
        self.shared.with_store(|s| {
            s.failures.insert(
                (method.to_string(), path.to_string()),
                codes.iter().rev().copied().collect(),
            );
        });
    }

    /// Lists of this resource wait until [`FakeApi::release_lists`].
    pub fn hold_lists(&self, group: &str, plural: &str) {
        self.shared
            .with_store(|s| s.held_lists.insert((group.into(), plural.into())));
    }

    pub fn release_lists(&self, group: &str, plural: &str) {
        self.shared.with_store(|s| {
            s.held_lists
                .remove(&(group.to_string(), plural.to_string()))
        });
        self.shared.released.send_modify(|n| *n += 1);
    }

    /// Runs `f` on the store and the registered resource `group`/`plural`
    /// (the bookkeeping every direct write shares).
    fn with_resource<T>(
        &self,
        group: &str,
        plural: &str,
        f: impl FnOnce(&mut Store, &ResourceDef) -> T,
    ) -> T {
        self.shared.with_store(|s| {
            let res = s
                .resource(group, plural)
                .unwrap_or_else(|| panic!("resource {group}/{plural} not registered"))
                .clone();
            f(s, &res)
        })
    }

    /// Creates an object (namespace taken from `metadata.namespace`). Unlike
    /// a POST, a given `metadata.creationTimestamp` is kept, so tests can
    /// decide which object is older.
    pub fn create(&self, group: &str, plural: &str, obj: Value) -> Value {
        self.with_resource(group, plural, |s, res| {
            let ns = obj["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_string();
            s.create(res, &ns, obj, true)
                .unwrap_or_else(|e| panic!("create {plural}: {e:?}"))
        })
    }

    /// Read-modify-write of an object, like `kubectl edit` (status changes
    /// are ignored when `/status` is a subresource).
    pub fn update(
        &self,
        group: &str,
        plural: &str,
        namespace: &str,
        name: &str,
        edit: impl FnOnce(&mut Value),
    ) -> Value {
        self.with_resource(group, plural, |s, res| {
            let key = (group.into(), plural.into(), namespace.into(), name.into());
            let mut obj = s
                .objects
                .get(&key)
                .cloned()
                .unwrap_or_else(|| panic!("{plural} {namespace}/{name} not found"));
            edit(&mut obj);
            s.replace(res, namespace, name, obj, false, true)
                .unwrap_or_else(|e| panic!("update {plural} {name}: {e:?}"))
        })
    }

    pub fn delete(&self, group: &str, plural: &str, namespace: &str, name: &str) -> Value {
        self.with_resource(group, plural, |s, res| {
            s.delete(res, namespace, name)
                .unwrap_or_else(|e| panic!("delete {plural} {name}: {e:?}"))
        })
    }

    pub fn get(&self, group: &str, plural: &str, namespace: &str, name: &str) -> Option<Value> {
        self.shared.with_store(|s| {
            s.objects
                .get(&(group.into(), plural.into(), namespace.into(), name.into()))
                .cloned()
        })
    }

    /// Every object of a resource (all namespaces).
    pub fn list(&self, group: &str, plural: &str) -> Vec<Value> {
        self.shared.with_store(|s| {
            s.objects
                .iter()
                .filter(|((g, p, _, _), _)| g == group && p == plural)
                .map(|(_, v)| v.clone())
                .collect()
        })
    }

    /// Events (core/v1 and events.k8s.io/v1) about the named object.
    pub fn events_for(&self, name: &str) -> Vec<Value> {
        let mut out = self.list("events.k8s.io", "events");
        out.extend(self.list("", "events"));
        out.retain(|e| {
            e["regarding"]["name"].as_str() == Some(name)
                || e["involvedObject"]["name"].as_str() == Some(name)
        });
        out
    }

    /// Before the next PATCH of this object, the fake applies `edit` to it
    /// (a concurrent writer between the client's read and its write): the
    /// object changes and its resourceVersion moves on. Once.
    pub fn interfere_next_patch(
        &self,
        group: &str,
        plural: &str,
        namespace: &str,
        name: &str,
        edit: impl FnOnce(&mut Value) + Send + 'static,
    ) {
        self.shared.with_store(|s| {
            s.interfere.push((
                (group.into(), plural.into(), namespace.into(), name.into()),
                Interference(Box::new(edit)),
            ))
        });
    }

    /// The PATCH requests served so far for one object (main resource).
    pub fn patches_of(&self, group: &str, plural: &str, namespace: &str, name: &str) -> usize {
        let prefix = if group.is_empty() {
            "/api/v1".to_string()
        } else {
            let version = self.shared.with_store(|s| {
                s.resource(group, plural)
                    .map(|r| r.version.clone())
                    .unwrap_or_default()
            });
            format!("/apis/{group}/{version}")
        };
        let path = format!("{prefix}/namespaces/{namespace}/{plural}/{name}");
        self.requests()
            .iter()
            .filter(|r| r.method == "PATCH" && r.path == path)
            .count()
    }

    /// The requests served so far.
    pub fn requests(&self) -> Vec<Request> {
        self.shared.with_store(|s| s.requests.clone())
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.with_store(|s| s.rv)
    }

    /// Closes every open watch connection (clients resume from their last
    /// resourceVersion).
    pub fn drop_watches(&self) {
        self.shared.kill.send_modify(|k| *k = (k.0 + 1, false));
    }

    /// Forgets the event log: a watch from any resourceVersion older than
    /// the current one gets `410 Gone`, forcing a relist.
    pub fn compact(&self) {
        self.shared.with_store(|s| {
            s.compacted = s.rv;
            s.log.clear();
        });
    }

    /// While `true`, every request (watches included) answers `503`, and
    /// the open watches are closed when it is switched on.
    pub fn set_unavailable(&self, unavailable: bool) {
        self.shared.with_store(|s| s.unavailable = unavailable);
        if unavailable {
            self.drop_watches();
        }
    }

    /// Writes `status` of an object the way its controller does (`PUT
    /// .../status`): only `status` and the resourceVersion change, and
    /// watchers see a MODIFIED event.
    pub fn update_status(
        &self,
        group: &str,
        plural: &str,
        namespace: &str,
        name: &str,
        status: Value,
    ) -> Value {
        self.with_resource(group, plural, |s, res| {
            let obj = json!({"metadata": {}, "status": status});
            s.replace(res, namespace, name, obj, true, false)
                .unwrap_or_else(|e| panic!("update status of {plural} {namespace}/{name}: {e:?}"))
        })
    }

    /// Creates many objects under one lock (benchmarks, large lists).
    pub fn create_many(&self, group: &str, plural: &str, objs: Vec<Value>) {
        self.with_resource(group, plural, |s, res| {
            for obj in objs {
                let ns = obj["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                s.create(res, &ns, obj, true)
                    .unwrap_or_else(|e| panic!("create {plural}: {e:?}"));
            }
        });
    }

    /// Forgets the event log up to now without expiring the open watches
    /// that already saw it (benchmarks: keeps the log short).
    pub fn compact_keep_watches(&self) {
        self.shared.with_store(|s| s.log.clear());
    }

    /// Compacts and sends every open watch an ERROR event with a `410
    /// Expired` Status, then closes it.
    pub fn expire_watches(&self) {
        self.compact();
        self.shared.kill.send_modify(|k| *k = (k.0 + 1, true));
    }
}

enum Path {
    Discovery(Value),
    Resource {
        group: String,
        plural: String,
        namespace: String,
        name: Option<String>,
        subresource: Option<String>,
    },
    NotFound,
}

fn parse_path(store: &Store, path: &str) -> Path {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest): (&str, &str, &[&str]) = match segs.as_slice() {
        ["api"] => return Path::Discovery(json!({"kind": "APIVersions", "versions": ["v1"]})),
        ["apis"] => {
            let mut groups: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
            for r in store.resources.iter().filter(|r| !r.group.is_empty()) {
                let vs = groups.entry(&r.group).or_default();
                if !vs.contains(&r.version.as_str()) {
                    vs.push(&r.version);
                }
            }
            let groups: Vec<Value> = groups
                .into_iter()
                .map(|(g, vs)| {
                    let versions: Vec<Value> = vs
                        .iter()
                        .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
                        .collect();
                    json!({"name": g, "versions": versions, "preferredVersion": versions[0]})
                })
                .collect();
            return Path::Discovery(
                json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}),
            );
        }
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Path::NotFound,
    };
    if rest.is_empty() {
        let resources: Vec<Value> = store
            .resources
            .iter()
            .filter(|r| r.group == group && r.version == version && !store.uninstalled.contains(&r.key()))
            .flat_map(|r| {
                let mut v = vec![json!({
                    "name": r.plural, "singularName": "", "namespaced": r.namespaced, "kind": r.kind,
                    "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                })];
                if r.status_subresource {
                    v.push(json!({"name": format!("{}/status", r.plural), "singularName": "",
                        "namespaced": r.namespaced, "kind": r.kind, "verbs": ["get", "patch", "update"]}));
                }
                v
            })
            .collect();
        if resources.is_empty() {
            return Path::NotFound;
        }
        let gv = if group.is_empty() {
            version.to_string()
        } else {
            format!("{group}/{version}")
        };
        return Path::Discovery(json!({"kind": "APIResourceList", "apiVersion": "v1",
            "groupVersion": gv, "resources": resources}));
    }
    let (namespace, tail): (&str, &[&str]) = match rest {
        ["namespaces", ns, plural, tail @ ..] => {
            let mut t = vec![*plural];
            t.extend_from_slice(tail);
            return finish_path(group, ns, &t);
        }
        _ => ("", rest),
    };
    finish_path(group, namespace, tail)
}

fn finish_path(group: &str, namespace: &str, tail: &[&str]) -> Path {
    match tail {
        [plural] => Path::Resource {
            group: group.into(),
            plural: (*plural).into(),
            namespace: namespace.into(),
            name: None,
            subresource: None,
        },
        [plural, name] => Path::Resource {
            group: group.into(),
            plural: (*plural).into(),
            namespace: namespace.into(),
            name: Some((*name).into()),
            subresource: None,
        },
        [plural, name, sub] => Path::Resource {
            group: group.into(),
            plural: (*plural).into(),
            namespace: namespace.into(),
            name: Some((*name).into()),
            subresource: Some((*sub).into()),
        },
        _ => Path::NotFound,
    }
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let query = parse_query(uri.query());
    let (parsed, injected) = shared.with_store(|s| {
        s.requests.push(Request {
            method: method.to_string(),
            path: uri.path().to_string(),
            query: uri.query().unwrap_or_default().to_string(),
        });
        let injected = s
            .failures
            .get_mut(&(method.to_string(), uri.path().to_string()))
            .and_then(Vec::pop)
            .or(s.unavailable.then_some(503));
        (parse_path(s, uri.path()), injected)
    });
    if let Some(code) = injected {
        return json_response(
            code,
            &status_value(code, "InternalError", "injected failure"),
        );
    }
    let (group, plural, namespace, name, subresource) = match parsed {
        Path::Discovery(v) => return json_response(200, &v),
        Path::NotFound => return not_found_resource(),
        Path::Resource {
            group,
            plural,
            namespace,
            name,
            subresource,
        } => (group, plural, namespace, name, subresource),
    };
    let Some(res) = shared.with_store(|s| s.installed(&group, &plural)) else {
        return not_found_resource();
    };
    if let Some(sub) = &subresource
        && (sub != "status" || !res.status_subresource)
    {
        return not_found_resource();
    }
    let status_only = subresource.is_some();
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_string();
    let parse_body = || -> Result<Value, ApiError> {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::new(400, "BadRequest", format!("body: {e}")))
    };
    let result = match (method.clone(), name) {
        (Method::GET, None) => {
            let watching = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
            if watching {
                return start_watch(shared, res, namespace, query);
            }
            return list(shared, res, namespace, query).await;
        }
        (Method::POST, None) => parse_body()
            .and_then(|obj| shared.with_store(|s| s.create(&res, &namespace, obj, false))),
        (Method::GET, Some(name)) => shared.with_store(|s| {
            s.objects
                .get(&res.obj_key(&namespace, &name))
                .cloned()
                .ok_or_else(|| res.not_found(&name))
        }),
        (Method::PUT, Some(name)) => parse_body().and_then(|obj| {
            shared.with_store(|s| s.replace(&res, &namespace, &name, obj, status_only, true))
        }),
        (Method::PATCH, Some(name)) => shared.with_store(|s| {
            let key = res.obj_key(&namespace, &name);
            if let Some(i) = s.interfere.iter().position(|(k, _)| *k == key) {
                let (_, Interference(edit)) = s.interfere.remove(i);
                if let Some(mut obj) = s.objects.get(&key).cloned() {
                    edit(&mut obj);
                    s.replace(&res, &namespace, &name, obj, false, true)
                        .expect("interfering write");
                }
            }
            s.patch(&res, &namespace, &name, &content_type, &body, status_only)
        }),
        (Method::DELETE, Some(name)) => shared.with_store(|s| s.delete(&res, &namespace, &name)),
        _ => Err(ApiError::new(
            405,
            "MethodNotAllowed",
            format!("{method} not supported here"),
        )),
    };
    match result {
        Ok(v) => json_response(if method == Method::POST { 201 } else { 200 }, &v),
        Err(e) => error_response(e),
    }
}

fn selectors(query: &HashMap<String, String>) -> Selectors {
    Selectors {
        labels: query
            .get("labelSelector")
            .map(|s| parse_selector(s))
            .unwrap_or_default(),
        fields: query
            .get("fieldSelector")
            .map(|s| parse_selector(s))
            .unwrap_or_default(),
    }
}

async fn list(
    shared: Arc<Shared>,
    res: ResourceDef,
    namespace: String,
    query: HashMap<String, String>,
) -> Response {
    // Held lists wait (bounded) until released.
    let mut released = shared.released.subscribe();
    for _ in 0..600 {
        let held = shared.with_store(|s| s.held_lists.contains(&res.key()));
        if !held {
            break;
        }
        let _ = tokio::time::timeout(Duration::from_millis(50), released.changed()).await;
    }
    let failure = shared.with_store(|s| s.list_failures.get_mut(&res.key()).and_then(Vec::pop));
    if let Some(code) = failure {
        return json_response(
            code,
            &status_value(code, "InternalError", "injected list failure"),
        );
    }
    let sel = selectors(&query);
    let limit: usize = query.get("limit").and_then(|l| l.parse().ok()).unwrap_or(0);
    let offset: usize = query
        .get("continue")
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    shared.with_store(|s| {
        let all: Vec<Value> = s.matching(&res, &namespace, &sel).cloned().collect();
        let end = if limit == 0 {
            all.len()
        } else {
            (offset + limit).min(all.len())
        };
        let items: Vec<Value> = all
            .get(offset.min(all.len())..end)
            .unwrap_or_default()
            .to_vec();
        let mut metadata = json!({"resourceVersion": s.rv.to_string()});
        if end < all.len() {
            metadata["continue"] = json!(end.to_string());
        }
        json_response(
            200,
            &json!({
                "kind": format!("{}List", res.kind),
                "apiVersion": res.api_version(),
                "metadata": metadata,
                "items": items,
            }),
        )
    })
}

fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut line = json!({"type": kind, "object": object}).to_string();
    line.push('\n');
    Bytes::from(line)
}

/// Events of the log after `since` that a watch with these parameters sees.
fn pending_events(
    store: &Store,
    res: &ResourceDef,
    namespace: &str,
    sel: &Selectors,
    since: u64,
) -> Vec<(u64, Bytes)> {
    let key = res.key();
    store
        .log
        .iter()
        .filter(|e| {
            e.rv > since && e.res == key && (namespace.is_empty() || e.namespace == namespace)
        })
        .filter_map(|e| {
            let now = sel.matches(&e.object);
            let before = e.old.as_ref().is_some_and(|o| sel.matches(o));
            let kind = match (e.kind, before, now) {
                ("ADDED", _, true) => "ADDED",
                ("DELETED", true, _) => "DELETED",
                ("MODIFIED", true, true) => "MODIFIED",
                ("MODIFIED", false, true) => "ADDED",
                ("MODIFIED", true, false) => "DELETED",
                _ => return None,
            };
            Some((e.rv, event_line(kind, &e.object)))
        })
        .collect()
}

fn start_watch(
    shared: Arc<Shared>,
    res: ResourceDef,
    namespace: String,
    query: HashMap<String, String>,
) -> Response {
    let sel = selectors(&query);
    let bookmarks = matches!(
        query.get("allowWatchBookmarks").map(String::as_str),
        Some("true" | "1")
    );
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let since_raw = query.get("resourceVersion").cloned().unwrap_or_default();
    let (tx, rx) = futures::channel::mpsc::channel::<Result<Bytes, Infallible>>(64);
    let mut kill = shared.kill.subscribe();
    kill.mark_unchanged();
    let mut changed = shared.changed.subscribe();
    // A watch that raced with `set_unavailable(true)` (admitted before,
    // subscribed after the watches were dropped) is refused too.
    if shared.with_store(|s| s.unavailable) {
        return json_response(503, &status_value(503, "ServiceUnavailable", "unavailable"));
    }
    // Initial backlog, computed under the lock together with subscribing.
    let (initial, mut since, gone) = shared.with_store(|s| {
        changed.mark_unchanged();
        match since_raw.parse::<u64>() {
            Ok(n) if n > 0 => {
                if n < s.compacted {
                    (Vec::new(), n, true)
                } else {
                    let ev = pending_events(s, &res, &namespace, &sel, n);
                    let last = ev.last().map(|e| e.0).unwrap_or(n);
                    (ev.into_iter().map(|e| e.1).collect(), last, false)
                }
            }
            // "" or "0": the current state as ADDED events.
            _ => {
                let ev: Vec<Bytes> = s
                    .matching(&res, &namespace, &sel)
                    .map(|o| event_line("ADDED", o))
                    .collect();
                (ev, s.rv, false)
            }
        }
    });
    let kind = res.kind.clone();
    let api_version = res.api_version();
    tokio::spawn(async move {
        let mut tx = tx;
        let gone_event = |rv: u64| {
            event_line(
                "ERROR",
                &status_value(410, "Expired", &format!("too old resource version: {rv}")),
            )
        };
        if gone {
            let _ = tx.send(Ok(gone_event(since))).await;
            return;
        }
        for line in initial {
            if tx.send(Ok(line)).await.is_err() {
                return;
            }
        }
        let deadline = tokio::time::Instant::now() + timeout;
        let mut bookmark = tokio::time::interval(BOOKMARK_EVERY);
        bookmark.tick().await;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return,
                k = kill.changed() => {
                    if k.is_err() {
                        return;
                    }
                    let send_gone = kill.borrow().1;
                    if send_gone {
                        let _ = tx.send(Ok(gone_event(since))).await;
                    }
                    return;
                }
                c = changed.changed() => {
                    if c.is_err() {
                        return;
                    }
                    changed.mark_unchanged();
                    let (events, rv_now, expired) = shared.with_store(|s| {
                        (pending_events(s, &res, &namespace, &sel, since), s.rv, since < s.compacted)
                    });
                    if expired {
                        let _ = tx.send(Ok(gone_event(since))).await;
                        return;
                    }
                    for (_, line) in events {
                        if tx.send(Ok(line)).await.is_err() {
                            return;
                        }
                    }
                    // Everything up to rv_now was seen (events of other
                    // resources move the watch on too).
                    since = rv_now;
                }
                _ = bookmark.tick(), if bookmarks => {
                    let obj = json!({"kind": kind, "apiVersion": api_version,
                        "metadata": {"resourceVersion": since.to_string()}});
                    if tx.send(Ok(event_line("BOOKMARK", &obj))).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(rx))
        .expect("watch response")
}
