//! One connection, from accept to close, with deadlines a client cannot
//! extend ([`super::Limits`] says each one):
//!
//! 1. TLS handshake (HTTPS only), holding a handshake slot; the slot is
//!    freed when the handshake ends, so held handshakes never count
//!    against the connection cap.
//! 2. An established slot (the longest-idle connection is shed when full).
//! 3. HTTP/1.1 or h2 (by ALPN or preface), until a deadline or a close.

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

use super::OnDrop;
use super::limits::{Limits, until_true};
use super::slots::{Activity, Evict, Slots};
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
    pub fn new(
        router: Router,
        draining: watch::Receiver<bool>,
        metrics: Option<Metrics>,
        limits: Limits,
    ) -> Arc<Shared> {
        Arc::new(Shared {
            router,
            draining,
            metrics,
            limits,
            handshakes: Slots::new(limits.max_handshakes, Evict::Oldest),
            established: Slots::new(limits.max_connections, Evict::LongestIdle),
        })
    }

    /// Counts a connection error (on the HTTPS listener only).
    pub fn error(&self, reason: &'static str) {
        if let Some(m) = &self.metrics {
            m.connection_error(reason);
        }
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
    let _open = shared.metrics.clone().map(|m| {
        m.open_connections.inc();
        OnDrop(move || {
            m.open_connections.dec();
        })
    });
    let _ = stream.set_nodelay(true);
    let Some(config) = tls else {
        return serve_http(&shared, stream, accepted, close).await;
    };
    let Some(slot) = shared.handshakes.admit(None) else {
        return;
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let head_deadline = accepted + shared.limits.header_read_timeout;
    let handshake = tokio::select! {
        r = acceptor.accept(stream) => r.map_err(|e| {
            tracing::debug!(error = %e, "TLS handshake failed");
            "tls_handshake"
        }),
        _ = slot.kill.notified() => Err("handshake_evicted"),
        _ = tokio::time::sleep_until(head_deadline.into()) => Err("handshake_timeout"),
    };
    drop(slot);
    match handshake {
        Ok(stream) => serve_http(&shared, stream, accepted, close).await,
        Err(reason) => shared.error(reason),
    }
}

/// The connection's requests, routed: each one counted in `activity`, its
/// answer tracked in `stalls`.
fn service(
    shared: &Shared,
    activity: Arc<Activity>,
    stalls: Arc<Stalls>,
) -> impl hyper::service::Service<
    hyper::Request<hyper::body::Incoming>,
    Response = hyper::Response<Tracked<axum::body::Body>>,
    Error = Infallible,
    Future: Send,
> + Clone
+ use<> {
    let (router, draining) = (shared.router.clone(), shared.draining.clone());
    hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let router = router.clone();
        let activity = activity.clone();
        let stalls = stalls.clone();
        let draining = *draining.borrow();
        async move {
            activity.request_started();
            // Also when the connection dies mid-request.
            let guard = OnDrop(move || activity.request_ended());
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
    let shortest = l.header_read_timeout.min(l.idle_timeout);
    let shortest = shortest.min(l.goaway_timeout).min(l.write_timeout);
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
    let svc = service(shared, activity.clone(), stalls.clone());
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
        let close_gracefully = tokio::select! {
            res = conn.as_mut() => {
                if let Err(e) = res {
                    tracing::debug!(error = %e, "connection ended with an error");
                }
                return;
            }
            _ = until_true(&mut close), if closing_since.is_none() => true,
            _ = slot.kill.notified(), if closing_since.is_none() => {
                shared.error("shed_idle");
                true
            }
            _ = tick.tick() => {
                if let Some(reason) = hard_close_reason(&limits, accepted, &activity, &stalls, closing_since) {
                    shared.error(reason);
                    return;
                }
                let idle = closing_since.is_none()
                    && activity.seen_request()
                    && activity.idle() >= limits.idle_timeout;
                if idle {
                    tracing::debug!("closing idle connection");
                }
                idle
            }
        };
        if close_gracefully {
            conn.as_mut().graceful_shutdown();
            closing_since = Some(Instant::now());
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
