//! The static-response TLS ceiling for `scripts/measure/bench-load`.
//!
//! The smallest server this repository can build on the same stack as
//! `serve` (tokio, tokio-rustls with the ring provider, hyper-util's auto
//! HTTP/1.1 + h2 connection builder): it reads each request body in full and
//! answers every POST with one fixed, small AdmissionReview. Whatever
//! throughput it reaches on a machine is the ceiling that `serve` is compared
//! with, since the absolute figures of a shared machine are noise.
//!
//! ```sh
//! cargo run --release --example static_tls_server -- 127.0.0.1:8444 /tmp/static-ca.pem [parse]
//! curl --cacert /tmp/static-ca.pem -d '{}' https://localhost:8444/mutate
//! ```
//!
//! The certificate is self-signed for `localhost` and `127.0.0.1`; its PEM is
//! written to the path given as the second argument (it is its own CA).
//! With `parse` as third argument it also parses each body into a
//! `serde_json::Value` (and drops it) before the fixed answer: the ceiling of
//! any handler that must read the review at all.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// What every POST gets: the shape of an allowed review without a patch.
const REPLY: &str = r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"00000000-0000-0000-0000-000000000000","allowed":true}}"#;

async fn handle(req: Request<Incoming>, parse: bool) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.method() != Method::POST {
        let mut resp = Response::new(Full::new(Bytes::from_static(b"{\"error\":\"POST only\"}")));
        *resp.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
        return Ok(resp);
    }
    // Read the body like a real handler must (keep-alive needs it consumed).
    let ok = match req.into_body().collect().await {
        Ok(body) if parse => serde_json::from_slice::<serde_json::Value>(&body.to_bytes()).is_ok(),
        Ok(_) => true,
        Err(_) => false,
    };
    let mut resp = Response::new(Full::new(Bytes::from_static(REPLY.as_bytes())));
    if !ok {
        *resp.status_mut() = StatusCode::BAD_REQUEST;
    }
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    Ok(resp)
}

fn tls_config(ca_out: &str) -> anyhow::Result<rustls::ServerConfig> {
    let certified =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()])?;
    std::fs::write(ca_out, certified.cert.pem())
        .map_err(|e| anyhow::anyhow!("writing the CA to {ca_out}: {e}"))?;
    let cert = certified.cert.der().clone();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
    let mut config = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(ca_out)) = (args.next(), args.next()) else {
        anyhow::bail!(
            "usage: static_tls_server LISTEN_ADDR CA_OUT [parse] (e.g. 127.0.0.1:8444 /tmp/ca.pem)"
        );
    };
    let parse = match args.next().as_deref() {
        None => false,
        Some("parse") => true,
        Some(other) => anyhow::bail!("third argument {other:?}: only `parse` is known"),
    };
    let addr: SocketAddr = listen
        .parse()
        .map_err(|e| anyhow::anyhow!("listen address {listen:?}: {e}"))?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let acceptor = TlsAcceptor::from(Arc::new(tls_config(&ca_out)?));
    let listener = TcpListener::bind(addr).await?;
    eprintln!("static_tls_server listening on https://{addr}, CA in {ca_out}, parse {parse}");
    let builder = Arc::new(auto::Builder::new(TokioExecutor::new()));

    loop {
        let (tcp, _) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                eprintln!("accept: {e}");
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let builder = builder.clone();
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let service = hyper::service::service_fn(move |req| handle(req, parse));
            let _ = builder.serve_connection(TokioIo::new(tls), service).await;
        });
    }
}
