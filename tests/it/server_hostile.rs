//! Hostile clients: connections held open in every way a client
//! can hold one must neither keep a normal review from being answered nor
//! stay open past the documented limits. Loopback, bounded in count and
//! time; the limits are shortened through the server's `Config`.

use crate::support;
use crate::support::tls;

use std::time::Duration;

use knative_ha_webhook::app::Config;
use serde_json::Value;
use support::corpus::review;
use support::*;
use tls::*;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::task::JoinSet;

/// Connections held per experiment (above the cap set below).
const HELD: usize = 60;
/// The connection cap in these tests.
const CAP: usize = 20;
/// Accept-to-first-request-head limit in these tests.
const HEAD: Duration = Duration::from_secs(5);
/// Bound on a normal review while connections are held (the limit under
/// test is longer, so a review that waits for a held slot fails).
const REVIEW_BOUND: Duration = Duration::from_secs(4);
/// Bound on waiting for the server to close held connections: the limit
/// plus slack for a loaded machine.
const CLOSE_BOUND: Duration = Duration::from_secs(12);

async fn hostile_fixture() -> Fixture {
    Fixture::start_with(|c: &mut Config| {
        c.server.limits.max_connections = CAP;
        c.server.limits.header_read_timeout = HEAD;
    })
    .await
}

/// What a held connection does after connecting.
#[derive(Clone, Copy)]
enum Drip {
    /// Nothing at all.
    Silent,
    /// An HTTP/1.1 request head, one byte every 200 ms, never finished.
    SlowHead,
    /// The h2 preface and SETTINGS, then a PING every 200 ms, no request.
    H2Pings,
}

/// Holds `s` open the way `drip` says until the server closes it (read EOF
/// or error, or a write error). Returns true when the server closed it.
async fn hold<S>(s: S, drip: Drip) -> bool
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut r, mut w) = tokio::io::split(s);
    match drip {
        Drip::Silent => {}
        Drip::SlowHead => {
            if w.write_all(b"POST /mutate HTTP/1.1\r\nHost: x\r\nX-Slow: ")
                .await
                .is_err()
            {
                return true;
            }
        }
        Drip::H2Pings => {
            let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
            hello.extend_from_slice(&h2_frame(0x4, 0, 0, &[]));
            if w.write_all(&hello).await.is_err() {
                return true;
            }
        }
    }
    let _ = w.flush().await;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let mut buf = vec![0u8; 4096];
    loop {
        tokio::select! {
            n = r.read(&mut buf) => match n {
                Ok(0) | Err(_) => return true,
                Ok(_) => {}
            },
            _ = tick.tick() => {
                let bytes = match drip {
                    Drip::Silent => continue,
                    Drip::SlowHead => b"b".to_vec(),
                    Drip::H2Pings => h2_frame(0x6, 0, 0, &[0u8; 8]),
                };
                if w.write_all(&bytes).await.is_err() || w.flush().await.is_err() {
                    return true;
                }
            }
        }
    }
}

/// One HTTP/2 frame: type, flags, stream id, payload.
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A real review of Knative's controller Deployment.
fn controller_review() -> Value {
    let controller = fixture("Deployment", "knative-serving", "controller");
    review("hostile-1", "CREATE", "knative-serving", &controller)
}

/// A normal review, on a new connection, answered 200 within REVIEW_BOUND.
async fn normal_review_succeeds(fx: &Fixture, proto: Proto) {
    let client = fx.client(proto);
    let send = client.post(fx.url()).json(&controller_review()).send();
    let resp = tokio::time::timeout(REVIEW_BOUND, send)
        .await
        .expect("a normal review is answered while connections are held")
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["response"]["uid"], "hostile-1");
}

/// Waits (bounded) until every held connection was closed by the server.
async fn all_closed(mut held: JoinSet<bool>) {
    let all = async {
        let mut closed = 0;
        while let Some(r) = held.join_next().await {
            if r.unwrap() {
                closed += 1;
            }
        }
        closed
    };
    let closed = tokio::time::timeout(CLOSE_BOUND, all)
        .await
        .expect("every held connection is closed by the server within the limit");
    assert_eq!(closed, HELD);
}

async fn hold_many(fx: &Fixture, drip: Drip, tls: bool, alpn: &'static [u8]) -> JoinSet<bool> {
    let mut held = JoinSet::new();
    for _ in 0..HELD {
        if tls {
            let s = raw_tls_alpn(&fx.pki.ca_pem, fx.server.addr, alpn).await;
            held.spawn(hold(s, drip));
        } else {
            let s = tokio::net::TcpStream::connect(fx.server.addr)
                .await
                .unwrap();
            held.spawn(hold(s, drip));
        }
    }
    // Let the server see them all.
    tokio::time::sleep(Duration::from_millis(300)).await;
    held
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_tcp_without_client_hello() {
    let fx = hostile_fixture().await;
    let held = hold_many(&fx, Drip::Silent, false, b"").await;
    normal_review_succeeds(&fx, Proto::H2).await;
    all_closed(held).await;
    fx.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_without_a_request() {
    let fx = hostile_fixture().await;
    let held = hold_many(&fx, Drip::Silent, true, b"http/1.1").await;
    normal_review_succeeds(&fx, Proto::H2).await;
    all_closed(held).await;
    fx.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_heads_at_five_bytes_per_second() {
    let fx = hostile_fixture().await;
    let held = hold_many(&fx, Drip::SlowHead, true, b"http/1.1").await;
    normal_review_succeeds(&fx, Proto::Http1).await;
    all_closed(held).await;
    fx.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_h2_with_pings_and_no_request() {
    let fx = hostile_fixture().await;
    let held = hold_many(&fx, Drip::H2Pings, true, b"h2").await;
    normal_review_succeeds(&fx, Proto::H2).await;
    all_closed(held).await;
    fx.server.stop().await;
}

async fn open_connections(fx: &Fixture) -> f64 {
    let m = metrics_text(fx.server.metrics_addr).await;
    sample(&m, "knative_ha_webhook_open_connections").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_pings_do_not_keep_an_idle_connection() {
    let fx = Fixture::start_with(|c: &mut Config| {
        c.server.limits.idle_timeout = Duration::from_secs(1);
    })
    .await;
    knative_ha_webhook::tls::install_crypto_provider();
    let client = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(fx.pki.ca_pem.as_bytes()).unwrap())
        .resolve(SVC, fx.server.addr)
        .http2_prior_knowledge()
        .http2_keep_alive_interval(Duration::from_millis(200))
        .http2_keep_alive_while_idle(true)
        .build()
        .unwrap();
    let resp = client.post(fx.url()).body("{}").send().await.unwrap();
    assert_eq!(resp.version(), reqwest::Version::HTTP_2);
    assert_eq!(open_connections(&fx).await, 1.0);
    let closed = becomes_true(CLOSE_BOUND, || async { open_connections(&fx).await == 0.0 }).await;
    assert!(closed, "an idle h2 connection sending PINGs is closed");
    fx.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_client_that_never_reads_is_closed_after_goaway() {
    let fx = Fixture::start_with(|c: &mut Config| {
        c.server.limits.idle_timeout = Duration::from_secs(1);
    })
    .await;
    let mut s = raw_tls_alpn(&fx.pki.ca_pem, fx.server.addr, b"h2").await;
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend_from_slice(&h2_frame(0x4, 0, 0, &[]));
    // GET / (HPACK static indices: :method GET, :scheme https, :path /),
    // END_STREAM | END_HEADERS; then never read, never ACK a PING.
    hello.extend_from_slice(&h2_frame(0x1, 0x5, 1, &[0x82, 0x87, 0x84]));
    s.write_all(&hello).await.unwrap();
    s.flush().await.unwrap();
    let served = becomes_true(Duration::from_secs(10), || async {
        let m = metrics_text(fx.server.metrics_addr).await;
        sample(
            &m,
            "knative_ha_webhook_http_errors_total{reason=\"not_found\"}",
        ) == Some(1.0)
    })
    .await;
    assert!(served, "the request was answered");
    let closed = becomes_true(CLOSE_BOUND, || async { open_connections(&fx).await == 0.0 }).await;
    assert!(
        closed,
        "a client that never acknowledges the GOAWAY PING is closed"
    );
    drop(s);
    fx.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_port_closes_held_connections_and_keeps_answering() {
    let fx = hostile_fixture().await;
    let mut held = JoinSet::new();
    for _ in 0..HELD {
        let s = tokio::net::TcpStream::connect(fx.server.metrics_addr)
            .await
            .unwrap();
        held.spawn(hold(s, Drip::Silent));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let probe = tokio::time::timeout(REVIEW_BOUND, get_status(fx.server.metrics_addr, "/readyz"))
        .await
        .expect("/readyz answers while connections are held");
    assert_eq!(probe.0, 200, "{}", probe.1);
    all_closed(held).await;
    fx.server.stop().await;
}

/// Sends an HTTP/1.1 request head announcing `len` body bytes and `sent`
/// bytes of the body; the rest never comes.
async fn big_body_started(
    fx: &Fixture,
    len: usize,
    sent: usize,
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let mut s = raw_tls(&fx.pki.ca_pem, fx.server.addr).await;
    let head = format!(
        "POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {len}\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&vec![b'['; sent]).await.unwrap();
    s.flush().await.unwrap();
    s
}

/// The status line and headers of the answer on `s`, if one comes within `limit`.
async fn answer_head<S: AsyncRead + Unpin>(s: &mut S, limit: Duration) -> Option<String> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    tokio::time::timeout(limit, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
            if got.windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
    })
    .await
    .ok()?;
    (!got.is_empty()).then(|| String::from_utf8_lossy(&got).to_lowercase())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn big_bodies_beyond_the_memory_budget_get_503_and_normal_reviews_pass() {
    let fx = Fixture::start().await;
    let mut bodies = Vec::new();
    // 3 MiB of each 7 MiB body arrives, then nothing: 24 MiB in all, beyond
    // the 16 MiB budget.
    for _ in 0..8 {
        bodies.push(big_body_started(&fx, 7 * 1024 * 1024, 3 * 1024 * 1024).await);
    }
    let mut refused = 0;
    for s in &mut bodies {
        // A body charged in full and then stalled ends in 408 later.
        if let Some(head) = answer_head(s, Duration::from_secs(3)).await
            && !head.starts_with("http/1.1 408")
        {
            assert!(head.starts_with("http/1.1 503"), "{head}");
            assert!(head.contains("retry-after:"), "{head}");
            refused += 1;
        }
    }
    assert!(
        (1..8).contains(&refused),
        "some big bodies are refused, not all: {refused} of 8"
    );
    normal_review_succeeds(&fx, Proto::H2).await;
    drop(bodies);
    fx.server.stop().await;
}

#[tokio::test]
async fn bad_request_answers_do_not_echo_the_request() {
    let fx = Fixture::start().await;
    let client = fx.client(Proto::Http1);
    let long = "A".repeat(64 * 1024);
    let mut bad_op = controller_review();
    bad_op["request"]["operation"] = Value::String(long.clone());
    let mut bad_kind = controller_review();
    bad_kind["kind"] = Value::String(long.clone());
    let mut long_uid = controller_review();
    long_uid["request"]["uid"] = Value::String(long);
    for (what, body) in [("operation", bad_op), ("kind", bad_kind), ("uid", long_uid)] {
        let resp = client.post(fx.url()).json(&body).send().await.unwrap();
        assert_eq!(resp.status(), 400, "{what}");
        let text = resp.text().await.unwrap();
        assert!(
            text.len() < 2048,
            "{what}: the 400 answer is {} bytes",
            text.len()
        );
    }
    fx.server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_client_with_a_closed_window_is_dropped_after_the_write_timeout() {
    let fx = Fixture::start_with(|c: &mut Config| {
        c.server.limits.write_timeout = Duration::from_secs(1);
    })
    .await;
    let mut s = raw_tls_alpn(&fx.pki.ca_pem, fx.server.addr, b"h2").await;
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    // SETTINGS_INITIAL_WINDOW_SIZE = 0: no answer body can be sent.
    hello.extend_from_slice(&h2_frame(0x4, 0, 0, &[0, 4, 0, 0, 0, 0]));
    hello.extend_from_slice(&h2_frame(0x1, 0x5, 1, &[0x82, 0x87, 0x84]));
    s.write_all(&hello).await.unwrap();
    s.flush().await.unwrap();
    let closed = becomes_true(CLOSE_BOUND, || async {
        let m = metrics_text(fx.server.metrics_addr).await;
        sample(
            &m,
            "knative_ha_webhook_connection_errors_total{reason=\"write_timeout\"}",
        ) == Some(1.0)
            && sample(&m, "knative_ha_webhook_open_connections") == Some(0.0)
    })
    .await;
    assert!(
        closed,
        "the connection whose answer is never taken is dropped"
    );
    drop(s);
    fx.server.stop().await;
}

/// Clients that announce big bodies and trickle them hold only what they
/// sent: eight connections that each declare `Content-Length: 2097152` and
/// send one byte (the whole 16 MiB budget when it was charged from the
/// header, so every real review waited 1 s and got 503) leave a real review
/// answered at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_lengths_that_never_come_do_not_spend_the_budget() {
    let fx = Fixture::start().await;
    let mut trickles = Vec::new();
    for _ in 0..8 {
        trickles.push(big_body_started(&fx, 2 * 1024 * 1024, 1).await);
    }
    for proto in [Proto::Http1, Proto::H2] {
        normal_review_succeeds(&fx, proto).await;
    }
    for s in &mut trickles {
        assert_eq!(
            answer_head(s, Duration::from_millis(200)).await,
            None,
            "a trickling body is not refused for the budget"
        );
    }
    drop(trickles);
    fx.server.stop().await;
}
