//! Certificate rotation the way the kubelet updates a mounted Secret (the
//! `..data` symlink swap) while clients keep sending: no failed request,
//! new handshakes get the new certificate; a mismatched or half-written
//! pair is never loaded and is counted.

use crate::support;
use crate::support::tls;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use knative_ha_webhook::app::Config;
use support::corpus::review;
use support::*;
use tls::*;

struct Load {
    ok: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
    errors: Arc<std::sync::Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Three senders: HTTP/1.1 keep-alive, h2, and a new connection per request.
fn start_load(fx: &Fixture) -> Load {
    let ok = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(std::sync::Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let controller = fixture("Deployment", "knative-serving", "controller");
    let clients = [
        fx.client(Proto::Http1),
        fx.client(Proto::H2),
        fresh_client(&fx.pki.ca_pem, fx.server.addr),
    ];
    let tasks = clients
        .into_iter()
        .enumerate()
        .map(|(n, client)| {
            let (ok, failed, errors, stop) =
                (ok.clone(), failed.clone(), errors.clone(), stop.clone());
            let url = fx.url();
            let body = review("load", "CREATE", "knative-serving", &controller);
            tokio::spawn(async move {
                // Bounded: at most 20 000 requests per sender.
                for i in 0..20_000 {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let res = match client.post(&url).json(&body).send().await {
                        Ok(r) => {
                            let status = r.status().as_u16();
                            r.bytes().await.map(|_| status)
                        }
                        Err(e) => Err(e),
                    };
                    match res {
                        Ok(200) => {
                            ok.fetch_add(1, Ordering::SeqCst);
                        }
                        Ok(status) => {
                            failed.fetch_add(1, Ordering::SeqCst);
                            errors
                                .lock()
                                .unwrap()
                                .push(format!("sender {n} #{i}: status {status}"));
                        }
                        Err(e) => {
                            failed.fetch_add(1, Ordering::SeqCst);
                            errors
                                .lock()
                                .unwrap()
                                .push(format!("sender {n} #{i}: {e:?}"));
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        })
        .collect();
    Load {
        ok,
        failed,
        errors,
        stop,
        tasks,
    }
}

async fn served_cn(fx: &Fixture) -> String {
    let c = fresh_client(&fx.pki.ca_pem, fx.server.addr);
    let resp = c.post(fx.url()).body("{}").send().await.unwrap();
    peer_cn(&resp)
}

async fn tls_reload_errors(fx: &Fixture) -> f64 {
    let m = metrics_text(fx.server.metrics_addr).await;
    sample(&m, "knative_ha_webhook_tls_reloads_total{result=\"error\"}").unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlink_swap_rotation_under_load_and_bad_pairs_are_refused() {
    // Production poll interval (500 ms): a swap is seen well within 2 s.
    let mut fx = Fixture::start_with(|c: &mut Config| {
        c.tls_poll_interval = Duration::from_millis(500);
    })
    .await;
    assert_eq!(served_cn(&fx).await, "server-1");
    let load = start_load(&fx);
    tokio::time::sleep(Duration::from_millis(300)).await;

    // 1. A good new pair via the `..data` swap.
    fx.secret.swap(&fx.pki.server_leaf("server-2"));
    let seen = becomes_true(Duration::from_secs(10), || served_cn_owned(&fx)).await;
    assert!(seen, "new handshakes get server-2");

    // 2. A mismatched pair (certificate of one key, another key): refused.
    let a = fx.pki.server_leaf("server-3");
    let b = fx.pki.server_leaf("server-4");
    let errors_before = tls_reload_errors(&fx).await;
    fx.secret
        .swap_raw(a.cert_pem.as_bytes(), b.key_pem.as_bytes());
    assert!(
        becomes_true(Duration::from_secs(10), || async {
            tls_reload_errors(&fx).await > errors_before
        })
        .await,
        "mismatched pair counted as a reload error"
    );
    assert_eq!(served_cn(&fx).await, "server-2", "old certificate kept");

    // 3. A half-written certificate: refused.
    let errors_before = tls_reload_errors(&fx).await;
    let c = fx.pki.server_leaf("server-5");
    let half = &c.cert_pem.as_bytes()[..c.cert_pem.len() / 2];
    fx.secret.swap_raw(half, c.key_pem.as_bytes());
    assert!(
        becomes_true(Duration::from_secs(10), || async {
            tls_reload_errors(&fx).await > errors_before
        })
        .await,
        "half-written certificate counted as a reload error"
    );
    assert_eq!(served_cn(&fx).await, "server-2", "old certificate kept");

    // 4. The complete pair lands: loaded.
    fx.secret.swap(&c);
    assert!(
        becomes_true(Duration::from_secs(10), || async {
            served_cn(&fx).await == "server-5"
        })
        .await,
        "server-5 loaded once complete"
    );
    let m = metrics_text(fx.server.metrics_addr).await;
    assert!(
        sample(
            &m,
            "knative_ha_webhook_tls_reloads_total{result=\"success\"}"
        )
        .unwrap()
            >= 3.0,
        "{m}"
    );

    tokio::time::sleep(Duration::from_millis(300)).await;
    load.stop.store(true, Ordering::SeqCst);
    for t in load.tasks {
        t.await.unwrap();
    }
    let errors = load.errors.lock().unwrap().clone();
    assert_eq!(
        load.failed.load(Ordering::SeqCst),
        0,
        "failed requests: {errors:?}"
    );
    assert!(load.ok.load(Ordering::SeqCst) > 30, "the senders did send");
    fx.server.stop().await;
}

async fn served_cn_owned(fx: &Fixture) -> bool {
    served_cn(fx).await == "server-2"
}
