//! One connection, from accept to close, with deadlines a client cannot
//! extend (see [`super::Limits`]):
//!
//! 1. TLS handshake (HTTPS only), holding a handshake slot; the slot is
//!    freed when the handshake ends, so held handshakes never count
//!    against the connection cap.
//! 2. An established slot (the longest-idle connection is shed when full).
//! 3. HTTP/1.1 or h2 (by ALPN or preface): the first complete request head
//!    must arrive within `header_read_timeout` of accept; the connection is
//!    closed gracefully `idle_timeout` after its last request (h2 PINGs and
//!    other frames do not count), hard `goaway_timeout` after that, and at
//!    once when an answer waits `write_timeout` for the client to read it.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, watch};
use tower::ServiceExt;

use super::limits::{Limits, until_true};
use super::slots::{Activity, Slots};
use super::stall::{StallIo, Stalls, Tracked};
use crate::telemetry::Metrics;

/// What every connection of one listener shares.
pub(crate) struct Shared {
    pub router: Router,
    /// True from the start of shutdown: HTTP/1.1 answers carry
    /// `Connection: close` (h2 connections are left alone until the
    /// shutdown delay ends: an early GOAWAY races with requests the client
    /// already put on the connection).
    pub draining: watch::Receiver<bool>,
    /// `None` for the metrics listener (its connections are not counted).
    pub metrics: Option<Metrics>,
    pub limits: Limits,
    pub handshakes: Arc<Slots>,
    pub established: Arc<Slots>,
}

impl Shared {
    fn error(&self, reason: &'static str) {
        if let Some(m) = &self.metrics {
            m.connection_error(reason);
        }
    }
}

struct OpenGuard(Option<Metrics>);
impl Drop for OpenGuard {
    fn drop(&mut self) {
        if let Some(m) = &self.0 {
            m.open_connections.dec();
        }
    }
}

/// Ends a request on drop (also when the connection dies mid-request).
struct RequestGuard(Arc<Activity>);
impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.0.request_ended();
    }
}

/// Serves one accepted connection; `tls` is the server config current at
/// accept time, `None` for plain HTTP.
pub(crate) async fn serve(
    shared: Arc<Shared>,
    stream: TcpStream,
    tls: Option<Arc<rustls::ServerConfig>>,
    close: watch::Receiver<bool>,
    _live: OwnedSemaphorePermit,
) {
    let accepted = Instant::now();
    if let Some(m) = &shared.metrics {
        m.open_connections.inc();
    }
    let _open = OpenGuard(shared.metrics.clone());
    let _ = stream.set_nodelay(true);
    let head_deadline =
        tokio::time::Instant::from_std(accepted + shared.limits.header_read_timeout);
    let Some(config) = tls else {
        return serve_http(&shared, stream, accepted, close).await;
    };
    let Some(slot) = shared.handshakes.admit(None) else {
        return;
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let stream = tokio::select! {
        r = acceptor.accept(stream) => match r {
            Ok(s) => s,
            Err(e) => {
                shared.error("tls_handshake");
                tracing::debug!(error = %e, "TLS handshake failed");
                return;
            }
        },
        _ = slot.kill.notified() => {
            shared.error("handshake_evicted");
            return;
        }
        _ = tokio::time::sleep_until(head_deadline) => {
            shared.error("handshake_timeout");
            return;
        }
    };
    drop(slot);
    serve_http(&shared, stream, accepted, close).await
}

type TrackedResponse = hyper::Response<Tracked<axum::body::Body>>;

fn service(
    router: Router,
    draining: watch::Receiver<bool>,
    activity: Arc<Activity>,
    stalls: Arc<Stalls>,
) -> impl hyper::service::Service<
    hyper::Request<hyper::body::Incoming>,
    Response = TrackedResponse,
    Error = Infallible,
    Future = impl Future<Output = Result<TrackedResponse, Infallible>> + Send,
> + Clone {
    hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let router = router.clone();
        let activity = activity.clone();
        let stalls = stalls.clone();
        let draining = *draining.borrow();
        async move {
            activity.request_started();
            let guard = RequestGuard(activity);
            let http1 = req.version() < hyper::Version::HTTP_2;
            let resp = router.oneshot(req.map(axum::body::Body::new)).await;
            drop(guard);
            resp.map(|mut resp| {
                if draining && http1 {
                    resp.headers_mut().insert(
                        hyper::header::CONNECTION,
                        hyper::header::HeaderValue::from_static("close"),
                    );
                }
                resp.map(|b| stalls.track(b))
            })
        }
    })
}

/// How often a connection checks its deadlines.
fn check_every(l: &Limits) -> Duration {
    let shortest = [
        l.header_read_timeout,
        l.idle_timeout,
        l.goaway_timeout,
        l.write_timeout,
    ]
    .into_iter()
    .min()
    .unwrap_or(Duration::from_secs(1));
    (shortest / 4).clamp(Duration::from_millis(20), Duration::from_secs(1))
}

async fn serve_http<I>(shared: &Shared, io: I, accepted: Instant, mut close: watch::Receiver<bool>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = shared.limits;
    let activity = Arc::new(Activity::new(accepted));
    let Some(slot) = shared.established.admit(Some(activity.clone())) else {
        shared.error("connection_cap");
        return;
    };
    let stalls = Stalls::new(accepted);
    let io = TokioIo::new(StallIo {
        inner: io,
        stalls: stalls.clone(),
    });
    let svc = service(
        shared.router.clone(),
        shared.draining.clone(),
        activity.clone(),
        stalls.clone(),
    );
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .keep_alive(true)
        .header_read_timeout(limits.header_read_timeout);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_concurrent_streams);
    let conn = builder.serve_connection(io, svc);
    tokio::pin!(conn);

    let mut tick = tokio::time::interval(check_every(&limits));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut closing_since: Option<Instant> = None;
    loop {
        tokio::select! {
            res = conn.as_mut() => {
                if let Err(e) = res {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            _ = until_true(&mut close), if closing_since.is_none() => {
                conn.as_mut().graceful_shutdown();
                closing_since = Some(Instant::now());
            }
            _ = slot.kill.notified(), if closing_since.is_none() => {
                shared.error("shed_idle");
                conn.as_mut().graceful_shutdown();
                closing_since = Some(Instant::now());
            }
            _ = tick.tick() => {
                if let Some(reason) = hard_close_reason(&limits, accepted, &activity, &stalls, closing_since) {
                    shared.error(reason);
                    return;
                }
                if closing_since.is_none()
                    && activity.seen_request()
                    && activity.idle() >= limits.idle_timeout
                {
                    tracing::debug!("closing idle connection");
                    conn.as_mut().graceful_shutdown();
                    closing_since = Some(Instant::now());
                }
            }
        }
    }
}

/// Why the connection must be dropped now, if it must.
fn hard_close_reason(
    limits: &Limits,
    accepted: Instant,
    activity: &Activity,
    stalls: &Stalls,
    closing_since: Option<Instant>,
) -> Option<&'static str> {
    if !activity.seen_request() && accepted.elapsed() >= limits.header_read_timeout {
        return Some("header_timeout");
    }
    if stalls.longest() >= limits.write_timeout {
        return Some("write_timeout");
    }
    if closing_since.is_some_and(|t| t.elapsed() >= limits.goaway_timeout) {
        return Some("goaway_timeout");
    }
    None
}
