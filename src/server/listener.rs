//! The HTTPS accept loop: TLS handshake (with the config current at accept
//! time), HTTP/1.1 keep-alive or h2 by ALPN, timeouts, a connection cap and
//! graceful connection shutdown.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tower::ServiceExt;

use crate::telemetry::Metrics;
use crate::tls::TlsReloader;

/// Connection limits and timeouts.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Open connections at most; further clients wait in the accept backlog.
    pub max_connections: usize,
    /// A TLS handshake must finish within this time.
    pub handshake_timeout: Duration,
    /// HTTP/1.1: a request head must arrive within this time (hyper also
    /// applies it while a keep-alive connection waits for its next request).
    pub header_read_timeout: Duration,
    /// A connection with no traffic and no request in progress for this
    /// long is closed gracefully.
    pub idle_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 1024,
            handshake_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(120),
        }
    }
}

pub(crate) struct Listener {
    pub listener: TcpListener,
    /// True from the start of shutdown: HTTP/1.1 responses carry
    /// `Connection: close`, so clients move to new connections (to other
    /// replicas once the endpoint is gone) while this server still accepts
    /// them. h2 connections are left alone until the delay ends: an early
    /// GOAWAY races with requests the client already put on the connection.
    pub draining: watch::Receiver<bool>,
    pub router: Router,
    pub tls: Arc<TlsReloader>,
    pub metrics: Metrics,
    pub limits: Limits,
    pub connections: Arc<Semaphore>,
}

impl Listener {
    /// Accepts until `stop_accept` turns true; each connection closes
    /// gracefully once `close_connections` turns true.
    pub async fn run(
        self,
        mut stop_accept: watch::Receiver<bool>,
        close_connections: watch::Receiver<bool>,
    ) {
        loop {
            let permit = tokio::select! {
                _ = until_true(&mut stop_accept) => break,
                p = self.connections.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => break,
                },
            };
            let (stream, peer) = tokio::select! {
                _ = until_true(&mut stop_accept) => break,
                r = self.listener.accept() => match r {
                    Ok(s) => s,
                    Err(e) => {
                        // e.g. EMFILE: back off instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        self.metrics.connection_error("accept");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            let Some(config) = self.tls.current() else {
                self.metrics.connection_error("no_certificate");
                tracing::warn!(%peer, "no TLS certificate loaded; closing connection");
                continue;
            };
            let conn = Connection {
                router: self.router.clone(),
                draining: self.draining.clone(),
                metrics: self.metrics.clone(),
                limits: self.limits,
                _permit: permit,
            };
            tokio::spawn(conn.serve(stream, config, close_connections.clone()));
        }
        tracing::info!("stopped accepting HTTPS connections");
    }
}

/// Completes once the watched flag is true.
pub(crate) async fn until_true(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|v| *v).await;
}

struct Connection {
    router: Router,
    draining: watch::Receiver<bool>,
    metrics: Metrics,
    limits: Limits,
    _permit: OwnedSemaphorePermit,
}

struct OpenGuard(Metrics);
impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open_connections.dec();
    }
}

impl Connection {
    async fn serve(
        self,
        stream: TcpStream,
        config: Arc<rustls::ServerConfig>,
        mut close: watch::Receiver<bool>,
    ) {
        self.metrics.open_connections.inc();
        let _open = OpenGuard(self.metrics.clone());
        let _ = stream.set_nodelay(true);
        let acceptor = tokio_rustls::TlsAcceptor::from(config);
        let tls = match tokio::time::timeout(self.limits.handshake_timeout, acceptor.accept(stream))
            .await
        {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => {
                self.metrics.connection_error("tls_handshake");
                tracing::debug!(error = %e, "TLS handshake failed");
                return;
            }
            Err(_) => {
                self.metrics.connection_error("handshake_timeout");
                return;
            }
        };

        let epoch = Instant::now();
        let last_activity = Arc::new(AtomicU64::new(0));
        let active_requests = Arc::new(AtomicUsize::new(0));
        let io = TokioIo::new(Activity {
            inner: tls,
            epoch,
            last: last_activity.clone(),
        });
        let router = self.router.clone();
        let active = active_requests.clone();
        let draining = self.draining.clone();
        let service =
            hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                let router = router.clone();
                let active = active.clone();
                let draining = *draining.borrow();
                async move {
                    let http1 = req.version() < hyper::Version::HTTP_2;
                    active.fetch_add(1, Ordering::SeqCst);
                    let resp = router.oneshot(req.map(axum::body::Body::new)).await;
                    active.fetch_sub(1, Ordering::SeqCst);
                    resp.map(|mut resp| {
                        if draining && http1 {
                            resp.headers_mut().insert(
                                hyper::header::CONNECTION,
                                hyper::header::HeaderValue::from_static("close"),
                            );
                        }
                        resp
                    })
                }
            });

        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .keep_alive(true)
            .header_read_timeout(self.limits.header_read_timeout);
        builder.http2().timer(TokioTimer::new());
        let conn = builder.serve_connection(io, service);
        tokio::pin!(conn);

        let check_every = (self.limits.idle_timeout / 4).max(Duration::from_millis(100));
        let mut idle_tick = tokio::time::interval(check_every);
        idle_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut closing = false;
        loop {
            tokio::select! {
                res = conn.as_mut() => {
                    if let Err(e) = res {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                    break;
                }
                _ = until_true(&mut close), if !closing => {
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                }
                _ = idle_tick.tick(), if !closing => {
                    let idle_ms = (epoch.elapsed().as_millis() as u64)
                        .saturating_sub(last_activity.load(Ordering::Relaxed));
                    if active_requests.load(Ordering::SeqCst) == 0
                        && Duration::from_millis(idle_ms) >= self.limits.idle_timeout
                    {
                        tracing::debug!("closing idle connection");
                        conn.as_mut().graceful_shutdown();
                        closing = true;
                    }
                }
            }
        }
    }
}

/// Records the time of the last successful read or write.
struct Activity<T> {
    inner: T,
    epoch: Instant,
    last: Arc<AtomicU64>,
}

impl<T> Activity<T> {
    fn touch(&self) {
        self.last
            .store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Activity<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let res = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(res, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.touch();
        }
        res
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Activity<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let res = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(res, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        res
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let res = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(res, Poll::Ready(Ok(n)) if n > 0) {
            self.touch();
        }
        res
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
