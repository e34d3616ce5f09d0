//! Write-stall detection: answers a client does not read.
//!
//! Two places can hold an answer back: the socket (HTTP/1.1, or h2 frames
//! already queued: a write that stays pending) and h2 flow control (a
//! response body not taken because the client's window is zero). [`Stalls`]
//! records both, and the connection closes when either lasts longer than
//! the write timeout.

use std::collections::BTreeMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Per-connection record of pending writes and unfinished answers.
#[derive(Debug)]
pub(crate) struct Stalls {
    epoch: Instant,
    /// 1 + milliseconds since `epoch` when a write became pending; 0 when none is.
    write_pending_since: AtomicU64,
    /// Unfinished response bodies: id -> milliseconds since `epoch` at creation.
    bodies: Mutex<(u64, BTreeMap<u64, u64>)>,
}

impl Stalls {
    pub fn new(epoch: Instant) -> Arc<Stalls> {
        Arc::new(Stalls {
            epoch,
            write_pending_since: AtomicU64::new(0),
            bodies: Mutex::new((0, BTreeMap::new())),
        })
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// How long the oldest stalled write or unfinished answer has waited.
    pub fn longest(&self) -> Duration {
        let now = self.now_ms();
        let write = match self.write_pending_since.load(Ordering::SeqCst) {
            0 => 0,
            since => now.saturating_sub(since - 1),
        };
        let body = self
            .bodies
            .lock()
            .ok()
            .and_then(|g| g.1.values().next().copied())
            .map_or(0, |since| now.saturating_sub(since));
        Duration::from_millis(write.max(body))
    }

    fn write_result<T>(&self, res: &Poll<io::Result<T>>) {
        match res {
            Poll::Pending => {
                let _ = self.write_pending_since.compare_exchange(
                    0,
                    self.now_ms() + 1,
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                );
            }
            Poll::Ready(_) => self.write_pending_since.store(0, Ordering::SeqCst),
        }
    }

    /// Tracks `body` until it is fully taken or dropped.
    pub fn track<B>(self: &Arc<Stalls>, body: B) -> Tracked<B> {
        let id = self.bodies.lock().map_or(0, |mut g| {
            g.0 += 1;
            let id = g.0;
            g.1.insert(id, self.now_ms());
            id
        });
        Tracked {
            inner: body,
            stalls: self.clone(),
            id,
        }
    }

    fn finish(&self, id: u64) {
        if let Ok(mut g) = self.bodies.lock() {
            g.1.remove(&id);
        }
    }
}

/// A response body registered in [`Stalls`] until its end is taken.
pub(crate) struct Tracked<B> {
    inner: B,
    stalls: Arc<Stalls>,
    id: u64,
}

impl<B> Drop for Tracked<B> {
    fn drop(&mut self) {
        self.stalls.finish(self.id);
    }
}

impl<B: Body + Unpin> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let res = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(res, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            self.stalls.finish(self.id);
        }
        res
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// An I/O stream that records in [`Stalls`] how long writes stay pending.
pub(crate) struct StallIo<T> {
    pub inner: T,
    pub stalls: Arc<Stalls>,
}

impl<T: AsyncRead + Unpin> AsyncRead for StallIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for StallIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let res = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.stalls.write_result(&res);
        res
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let res = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.stalls.write_result(&res);
        res
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let res = Pin::new(&mut self.inner).poll_flush(cx);
        self.stalls.write_result(&res);
        res
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
