//! The log writer: each line is handed to a bounded queue without blocking
//! the request path, and one thread writes the queued lines to stderr in
//! batches (one buffered write per batch instead of one `write(2)` per line
//! from every worker thread under stderr's lock), flushing whenever the
//! queue is empty. When the queue is full the line is dropped and counted
//! (`knative_ha_webhook_log_lines_dropped`): a log must never stall
//! admission. [`flush`] (and [`FlushOnDrop`]) waits until every queued line
//! is written, so nothing is lost when the process ends.

use std::io::{self, Write};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{LazyLock, OnceLock};
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tracing_subscriber::fmt::MakeWriter;

/// Lines the queue holds at most.
const QUEUE_LINES: usize = 16 * 1024;

/// After writing a batch the writer rests this long before it looks at the
/// queue again. While it rests no sender has to wake it (otherwise a futex
/// wake and a context switch per line: about 5 % of serve's CPU in a `perf`
/// profile under load); lines reach stderr at most this much later.
const LINGER: Duration = Duration::from_millis(5);

/// How long [`flush`] waits for the writer at most.
const FLUSH_WAIT: Duration = Duration::from_secs(2);

/// Log lines dropped because the queue was full.
pub static DROPPED: LazyLock<Counter> = LazyLock::new(Counter::default);

enum Msg {
    Line(Vec<u8>),
    Flush(SyncSender<()>),
}

/// The writer `tracing_subscriber` formats into (cheap to clone).
#[derive(Clone, Debug)]
pub struct NonBlocking {
    tx: SyncSender<Msg>,
}

static WRITER: OnceLock<NonBlocking> = OnceLock::new();

/// The process's writer; its thread starts on first use.
pub fn non_blocking() -> NonBlocking {
    WRITER
        .get_or_init(|| {
            let (tx, rx) = mpsc::sync_channel(QUEUE_LINES);
            let spawned = std::thread::Builder::new()
                .name("log-writer".into())
                .spawn(move || write_lines(rx, io::stderr()));
            // Without a thread the queue is never read: every line then
            // goes straight to stderr (see `Line::drop`).
            if spawned.is_err() {
                let (dead, _) = mpsc::sync_channel(0);
                return NonBlocking { tx: dead };
            }
            NonBlocking { tx }
        })
        .clone()
}

/// Waits (at most 2 s) until every line logged so far is written.
pub fn flush() {
    let Some(writer) = WRITER.get() else { return };
    let (ack, done) = mpsc::sync_channel(1);
    if writer.tx.send(Msg::Flush(ack)).is_ok() {
        let _ = done.recv_timeout(FLUSH_WAIT);
    }
}

/// Calls [`flush`] when dropped: hold one for as long as the process logs.
#[derive(Debug)]
pub struct FlushOnDrop;

impl Drop for FlushOnDrop {
    fn drop(&mut self) {
        flush();
    }
}

fn write_lines(rx: Receiver<Msg>, out: impl Write) {
    let mut out = io::BufWriter::with_capacity(64 * 1024, out);
    let mut acks = Vec::new();
    while let Ok(first) = rx.recv() {
        let mut next = Some(first);
        while let Some(msg) = next {
            match msg {
                Msg::Line(line) => {
                    let _ = out.write_all(&line);
                }
                Msg::Flush(ack) => acks.push(ack),
            }
            next = rx.try_recv().ok();
        }
        let _ = out.flush();
        for ack in acks.drain(..) {
            let _ = ack.send(());
        }
        std::thread::sleep(LINGER);
    }
}

impl<'a> MakeWriter<'a> for NonBlocking {
    type Writer = Line<'a>;

    fn make_writer(&'a self) -> Line<'a> {
        Line {
            to: self,
            buf: Vec::new(),
        }
    }
}

/// One log line being written; queued when dropped.
#[derive(Debug)]
pub struct Line<'a> {
    to: &'a NonBlocking,
    buf: Vec<u8>,
}

impl Write for Line<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for Line<'_> {
    fn drop(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        match self
            .to
            .tx
            .try_send(Msg::Line(std::mem::take(&mut self.buf)))
        {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                DROPPED.inc();
            }
            Err(TrySendError::Disconnected(msg)) => {
                if let Msg::Line(line) = msg {
                    let _ = io::stderr().write_all(&line);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn lines_arrive_whole_in_order_and_a_flush_waits_for_them() {
        let (tx, rx) = mpsc::sync_channel(4);
        let out = Shared::default();
        let sink = out.clone();
        let thread = std::thread::spawn(move || write_lines(rx, sink));
        let writer = NonBlocking { tx };
        for i in 0..3 {
            let mut line = writer.make_writer();
            write!(line, "line {i}").unwrap();
            line.write_all(b"\n").unwrap();
        }
        let (ack, done) = mpsc::sync_channel(1);
        writer.tx.send(Msg::Flush(ack)).unwrap();
        done.recv_timeout(FLUSH_WAIT).unwrap();
        assert_eq!(
            String::from_utf8(out.0.lock().unwrap().clone()).unwrap(),
            "line 0\nline 1\nline 2\n"
        );
        drop(writer);
        thread.join().unwrap();
    }

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_blocking() {
        // No thread reads this queue of one.
        let (tx, _rx) = mpsc::sync_channel(1);
        let writer = NonBlocking { tx };
        let before = DROPPED.get();
        for _ in 0..3 {
            writer.make_writer().write_all(b"x\n").unwrap();
        }
        assert_eq!(DROPPED.get() - before, 2);
    }
}
