//! The log writer: `tracing-appender`'s non-blocking writer in lossy mode,
//! a bounded queue its worker thread writes to stderr. A line that finds
//! the queue full is dropped and counted ([`DroppedLines`]): a log must
//! never stall admission. What this module adds is [`Batches`], the
//! worker's output: a batch of lines is one `write(2)`, and a short rest
//! after each batch spares senders waking the worker per line ([`LINGER`]).

use std::io::{self, BufWriter, Write};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};
use tracing_appender::non_blocking::{NonBlocking, NonBlockingBuilder, WorkerGuard};

/// Lines the queue holds at most (docs/server.md: "more than 16,384 lines
/// behind").
const QUEUE_LINES: usize = 16 * 1024;

/// After writing a batch the worker rests this long before it looks at the
/// queue again. While it rests no sender has to wake it (otherwise a futex
/// wake and a context switch per line: about 5 % of serve's CPU in a `perf`
/// profile under load); lines reach stderr at most this much later.
const LINGER: Duration = Duration::from_millis(5);

/// The process's writer and the guard that flushes it.
static WRITER: OnceLock<NonBlocking> = OnceLock::new();
static GUARD: Mutex<Option<WorkerGuard>> = Mutex::new(None);

/// The process's writer; its thread starts on first use.
pub fn non_blocking() -> NonBlocking {
    WRITER
        .get_or_init(|| {
            let (writer, guard) = builder(QUEUE_LINES).finish(Batches::new(io::stderr(), LINGER));
            *GUARD.lock().unwrap_or_else(PoisonError::into_inner) = Some(guard);
            writer
        })
        .clone()
}

/// The writer's settings: lossy, `lines` queued at most.
fn builder(lines: usize) -> NonBlockingBuilder {
    NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(lines)
        .thread_name("log-writer")
}

/// Waits until every line logged so far is written (the crate's guard
/// waits at most about 1 s) and stops the writer: call it when the process
/// ends. Lines logged afterwards are dropped (and counted).
pub fn flush() {
    drop(GUARD.lock().unwrap_or_else(PoisonError::into_inner).take());
}

/// Calls [`flush`] when dropped: hold one for as long as the process logs.
#[derive(Debug)]
pub struct FlushOnDrop;

impl Drop for FlushOnDrop {
    fn drop(&mut self) {
        flush();
    }
}

/// The worker's output: `out` behind a 64 KiB buffer. The worker calls
/// `flush` once the queue is empty; the buffer is written then, and the
/// worker rests for `linger`.
struct Batches<W: Write> {
    out: BufWriter<W>,
    linger: Duration,
}

impl<W: Write> Batches<W> {
    fn new(out: W, linger: Duration) -> Self {
        Batches {
            out: BufWriter::with_capacity(64 * 1024, out),
            linger,
        }
    }
}

impl<W: Write> Write for Batches<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.out.write(bytes)
    }

    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)
    }

    fn flush(&mut self) -> io::Result<()> {
        let flushed = self.out.flush();
        std::thread::sleep(self.linger);
        flushed
    }
}

/// `knative_ha_webhook_log_lines_dropped`: the writer's error counter (0
/// before the writer starts).
#[derive(Debug)]
pub struct DroppedLines;

impl TypedMetric for DroppedLines {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for DroppedLines {
    fn encode(&self, mut encoder: MetricEncoder) -> std::fmt::Result {
        let dropped = WRITER
            .get()
            .map_or(0, |w| w.error_counter().dropped_lines());
        let dropped = u64::try_from(dropped).unwrap_or(u64::MAX);
        encoder.encode_counter::<NoLabelSet, _, u64>(&dropped, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
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
    fn lines_arrive_whole_in_order_and_the_guard_waits_for_them() {
        let out = Shared::default();
        let (writer, guard) = builder(4).finish(Batches::new(out.clone(), LINGER));
        for i in 0..3 {
            let mut line = writer.clone();
            line.write_all(format!("line {i}\n").as_bytes()).unwrap();
        }
        drop(guard);
        assert_eq!(
            String::from_utf8(out.0.lock().unwrap().clone()).unwrap(),
            "line 0\nline 1\nline 2\n"
        );
    }

    /// A sink whose first write waits until the test lets it go.
    struct Stuck(mpsc::Receiver<()>);
    impl Write for Stuck {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            let _ = self.0.recv();
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_blocking() {
        let (release, stuck) = mpsc::channel();
        // No buffer: the worker's first write blocks in `Stuck`.
        let (mut writer, guard) = builder(1).finish(Stuck(stuck));
        writer.write_all(b"taken by the worker\n").unwrap();
        // Until the worker has taken the first line, the queue may hold it.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut dropped = 0;
        while dropped < 3 && std::time::Instant::now() < deadline {
            writer.write_all(b"x\n").unwrap();
            dropped = writer.error_counter().dropped_lines();
        }
        assert_eq!(dropped, 3, "a full queue drops the line and counts it");
        drop(release);
        drop(guard);
    }

    #[test]
    fn the_counter_is_exported_before_the_writer_starts() {
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("log_lines_dropped", "dropped", DroppedLines);
        let text = crate::telemetry::encode(&registry);
        assert!(text.contains("# TYPE log_lines_dropped counter"), "{text}");
        assert!(text.contains("log_lines_dropped_total "), "{text}");
    }
}
