//! TLS set-up: key formats, certificate chains, mTLS accepted and refused,
//! the client CA reloaded.

use crate::support;
use crate::support::tls;

use knative_ha_webhook::app::{Config, PolicySource};
use knative_ha_webhook::tls::TlsSource;
use serde_json::Value;
use support::corpus::review;
use support::*;
use tls::*;

async fn send(client: &reqwest::Client, addr: std::net::SocketAddr) -> Result<u16, reqwest::Error> {
    let controller = fixture("Deployment", "knative-serving", "controller");
    let resp = client
        .post(mutate_url(addr))
        .json(&review("t", "CREATE", "knative-serving", &controller))
        .send()
        .await?;
    let status = resp.status().as_u16();
    let _: Value = resp.json().await?;
    Ok(status)
}

fn write(dir: &std::path::Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[tokio::test]
async fn key_formats_and_chains_are_served() {
    let pki = Pki::new("root");
    let names = [SVC, "localhost"];
    // (case, certificate file, key file)
    let (inter_pem, inter) = pki.intermediate("intermediate");
    let chained = inter.leaf(&names, "chained");
    let cases: Vec<(&str, String, String)> = vec![
        (
            "RSA key, PKCS#1",
            pki.leaf_with_key(&names, "rsa", &test_key("rsa-pkcs8.key")),
            test_key("rsa-pkcs1.key"),
        ),
        (
            "RSA key, PKCS#8",
            pki.leaf_with_key(&names, "rsa8", &test_key("rsa-pkcs8.key")),
            test_key("rsa-pkcs8.key"),
        ),
        (
            "EC key, SEC1",
            pki.leaf_with_key(&names, "ec", &test_key("ec-pkcs8.key")),
            test_key("ec-sec1.key"),
        ),
        (
            "chain: leaf then intermediate",
            format!("{}{}", chained.cert_pem, inter_pem),
            chained.key_pem.clone(),
        ),
    ];
    for (name, cert, key) in cases {
        let dir = tempfile::tempdir().unwrap();
        let tls = TlsSource::Files {
            cert: write(dir.path(), "tls.crt", &cert),
            key: write(dir.path(), "tls.key", &key),
            client_ca: None,
        };
        let server = Running::start(Config::for_tests(
            tls,
            PolicySource::File(example_policy_path()),
        ))
        .await;
        for proto in [Proto::Http1, Proto::H2] {
            let c = client(&pki.ca_pem, server.addr, proto, None);
            assert_eq!(
                send(&c, server.addr).await.unwrap(),
                200,
                "{name} {proto:?}"
            );
        }
        server.stop().await;
    }
}

#[tokio::test]
async fn leaf_without_its_intermediate_is_not_trusted() {
    // The negative control for the chain case above: without the
    // intermediate in the file, a client trusting only the root refuses.
    let pki = Pki::new("root");
    let (_, inter) = pki.intermediate("intermediate");
    let leaf = inter.leaf(&[SVC], "alone");
    let dir = tempfile::tempdir().unwrap();
    let tls = TlsSource::Files {
        cert: write(dir.path(), "tls.crt", &leaf.cert_pem),
        key: write(dir.path(), "tls.key", &leaf.key_pem),
        client_ca: None,
    };
    let server = Running::start(Config::for_tests(
        tls,
        PolicySource::File(example_policy_path()),
    ))
    .await;
    let c = client(&pki.ca_pem, server.addr, Proto::Http1, None);
    assert!(send(&c, server.addr).await.is_err());
    server.stop().await;
}

#[tokio::test]
async fn mutual_tls_accepts_only_clients_of_the_client_ca() {
    let server_pki = Pki::new("server CA");
    let client_pki = Pki::new("client CA");
    let other_pki = Pki::new("other CA");
    let dir = tempfile::tempdir().unwrap();
    let pair = server_pki.server_leaf("server");
    let ca_path = write(dir.path(), "client-ca.crt", &client_pki.ca_pem);
    let tls = TlsSource::Files {
        cert: write(dir.path(), "tls.crt", &pair.cert_pem),
        key: write(dir.path(), "tls.key", &pair.key_pem),
        client_ca: Some(ca_path.clone()),
    };
    let server = Running::start(Config::for_tests(
        tls,
        PolicySource::File(example_policy_path()),
    ))
    .await;
    let good = client_pki.leaf(&["kube-apiserver"], "kube-apiserver");
    let wrong = other_pki.leaf(&["kube-apiserver"], "impostor");

    for proto in [Proto::Http1, Proto::H2] {
        let ok = client(&server_pki.ca_pem, server.addr, proto, Some(&good));
        assert_eq!(
            send(&ok, server.addr).await.unwrap(),
            200,
            "{proto:?}: client cert of the client CA"
        );
        let none = client(&server_pki.ca_pem, server.addr, proto, None);
        assert!(
            send(&none, server.addr).await.is_err(),
            "{proto:?}: no client cert"
        );
        let bad = client(&server_pki.ca_pem, server.addr, proto, Some(&wrong));
        assert!(
            send(&bad, server.addr).await.is_err(),
            "{proto:?}: client cert of another CA"
        );
    }

    // The client CA is reloaded: trust the other CA instead.
    std::fs::write(&ca_path, &other_pki.ca_pem).unwrap();
    let (pca, addr) = (server_pki.ca_pem.clone(), server.addr);
    let wrong2 = wrong.clone();
    assert!(
        becomes_true(std::time::Duration::from_secs(10), || {
            let c = fresh_identity_client(&pca, addr, &wrong2);
            async move { send(&c, addr).await.is_ok() }
        })
        .await,
        "new client CA in force"
    );
    let old = fresh_identity_client(&server_pki.ca_pem, server.addr, &good);
    assert!(
        send(&old, server.addr).await.is_err(),
        "old client CA no longer trusted"
    );
    server.stop().await;
}

fn fresh_identity_client(ca: &str, addr: std::net::SocketAddr, id: &Pair) -> reqwest::Client {
    client(ca, addr, Proto::Http1, Some(id))
}
