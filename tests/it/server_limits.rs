//! Connection limits and timeouts, and the body limit without a
//! Content-Length (driven in-process through `server::router`).

use crate::support;
use crate::support::router;
use crate::support::tls;

use std::time::Duration;

use axum::body::Body;
use knative_ha_webhook::admission::ReviewOptions;
use knative_ha_webhook::app::Config;
use knative_ha_webhook::store::PolicyStore;
use router::Mutate;
use support::*;
use tls::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn open_connections(metrics_addr: std::net::SocketAddr) -> f64 {
    let m = metrics_text(metrics_addr).await;
    sample(&m, "knative_ha_webhook_open_connections").unwrap()
}

/// Reads until EOF or error (the server closed the connection); bounded.
async fn closed_by_server<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> bool {
    let mut buf = [0u8; 1024];
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return true,
                Ok(_) => continue,
            }
        }
    })
    .await
    .unwrap_or(false)
}

#[tokio::test]
async fn idle_connections_are_closed() {
    let fx = Fixture::start_with(|c: &mut Config| {
        c.server.limits.idle_timeout = Duration::from_secs(2);
    })
    .await;
    let client = fx.client(Proto::H2);
    let resp = client.post(fx.url()).body("{}").send().await.unwrap();
    assert_eq!(resp.version(), reqwest::Version::HTTP_2);
    assert_eq!(resp.status(), 400);
    assert_eq!(
        open_connections(fx.server.metrics_addr).await,
        1.0,
        "h2 connection kept open"
    );
    let m = fx.server.metrics_addr;
    assert!(
        becomes_true(Duration::from_secs(15), || async move {
            open_connections(m).await == 0.0
        })
        .await,
        "idle h2 connection closed by the server"
    );
    // The client simply reconnects.
    let resp = client.post(fx.url()).body("{}").send().await.unwrap();
    assert_eq!(resp.status(), 400);
    fx.server.stop().await;
}

#[tokio::test]
async fn slow_handshakes_are_cut_off() {
    let fx = Fixture::start_with(|c: &mut Config| {
        c.server.limits.header_read_timeout = Duration::from_millis(300);
    })
    .await;
    // TCP connected, no ClientHello.
    let mut tcp = tokio::net::TcpStream::connect(fx.server.addr)
        .await
        .unwrap();
    assert!(
        closed_by_server(&mut tcp).await,
        "handshake timeout closes the connection"
    );
    let m = metrics_text(fx.server.metrics_addr).await;
    assert_eq!(
        sample(
            &m,
            "knative_ha_webhook_connection_errors_total{reason=\"handshake_timeout\"}"
        ),
        Some(1.0),
        "{m}"
    );
    fx.server.stop().await;
}

#[tokio::test]
async fn slow_request_heads_are_cut_off() {
    let fx = Fixture::start_with(|c: &mut Config| {
        c.server.limits.header_read_timeout = Duration::from_millis(300);
    })
    .await;
    // TLS up, request head never finished.
    let mut tls = raw_tls(&fx.pki.ca_pem, fx.server.addr).await;
    tls.write_all(b"POST /mutate HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    tls.flush().await.unwrap();
    assert!(
        closed_by_server(&mut tls).await,
        "header read timeout closes the connection"
    );
    fx.server.stop().await;
}

#[tokio::test]
async fn connection_cap_sheds_the_longest_idle_connection() {
    let fx = Fixture::start_with(|c: &mut Config| {
        c.server.limits.max_connections = 1;
        c.server.limits.header_read_timeout = Duration::from_secs(60);
    })
    .await;
    // Take the only slot with a TLS connection that sends nothing.
    let mut hog = raw_tls(&fx.pki.ca_pem, fx.server.addr).await;
    let m = fx.server.metrics_addr;
    assert!(
        becomes_true(Duration::from_secs(10), || async move {
            open_connections(m).await == 1.0
        })
        .await
    );
    // A new client is served at once: the idle hog makes room.
    let client = fx.client(Proto::Http1);
    let resp = client.post(fx.url()).body("{}").send().await.unwrap();
    assert_eq!(resp.status(), 400);
    assert!(
        closed_by_server(&mut hog).await,
        "the idle connection was closed to make room"
    );
    let m = metrics_text(fx.server.metrics_addr).await;
    assert_eq!(
        sample(
            &m,
            "knative_ha_webhook_connection_errors_total{reason=\"shed_idle\"}"
        ),
        Some(1.0),
        "{m}"
    );
    fx.server.stop().await;
}

#[tokio::test]
async fn body_limit_applies_without_content_length() {
    let mutate = Mutate::new(PolicyStore::default(), ReviewOptions::default());
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..8).map(|_| Ok(vec![b' '; 1024 * 1024])).collect();
    let body = Body::from_stream(futures::stream::iter(chunks));
    let req = axum::http::Request::post("/mutate").body(body).unwrap();
    assert!(req.headers().get("content-length").is_none());
    let (status, v) = mutate.send(req).await;
    assert_eq!(status, 413);
    assert_eq!(v["code"], 413);

    // Just under the limit: parsed (and rejected as not JSON -> 400, not 413).
    let req = axum::http::Request::post("/mutate")
        .body(Body::from(vec![b'x'; 7 * 1024 * 1024]))
        .unwrap();
    let (status, _) = mutate.send(req).await;
    assert_eq!(status, 400);
}
