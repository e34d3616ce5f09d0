//! `POST /mutate`: Knative objects in, base64 JSON patches out, through the
//! router in process (`oneshot`); over real loopback TLS (HTTP/1.1 and h2)
//! what needs it: the protocols, limits, bad requests, readiness and
//! metrics. Every kind of bad input gets a well-formed answer.

use crate::support;
use crate::support::router;
use crate::support::tls;

use base64::Engine as _;
use knative_ha_webhook::admission::NOT_SYNCED_WARNING;
use knative_ha_webhook::admission::ReviewOptions;
use knative_ha_webhook::app::{Config, PolicySource};
use knative_ha_webhook::engine::{Input, Operation};
use knative_ha_webhook::store::PolicyStore;
use router::{Mutate, example_snapshot};
use serde_json::{Value, json};
use support::corpus::review;
use support::*;
use tls::*;

async fn post(client: &reqwest::Client, url: &str, body: &Value) -> (u16, Value, reqwest::Version) {
    let resp = client.post(url).json(body).send().await.unwrap();
    let status = resp.status().as_u16();
    let version = resp.version();
    let body: Value = resp.json().await.unwrap();
    (status, body, version)
}

fn decode_patch(response: &Value) -> json_patch::Patch {
    let b64 = response["patch"]
        .as_str()
        .expect("patch is a base64 string");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("standard base64");
    serde_json::from_slice(&bytes).expect("patch is an RFC 6902 JSON patch")
}

/// Every governed object of the Knative v1.23.0 manifests gets the
/// engine's changes as warnings and a patch that applies and equals the
/// engine's result (through the router in process).
#[tokio::test]
async fn knative_objects_get_patches_that_apply() {
    let mutate = Mutate::example();
    let snapshot = example_snapshot();
    let objects: Vec<Value> = support::corpus::governed_objects()
        .into_iter()
        .map(|(_, object)| object)
        .collect();
    assert!(
        objects.len() >= 8,
        "fixture objects found: {}",
        objects.len()
    );
    for (i, object) in objects.iter().enumerate() {
        let what = format!(
            "{}/{}",
            object["kind"].as_str().unwrap(),
            object["metadata"]["name"].as_str().unwrap()
        );
        let uid = format!("uid-{i}");
        let (status, body) = mutate
            .post(&review(&uid, "CREATE", "knative-serving", object))
            .await;
        assert_eq!(status, 200, "{what}: {body}");
        assert_eq!(body["apiVersion"], "admission.k8s.io/v1", "{what}");
        assert_eq!(body["kind"], "AdmissionReview", "{what}");
        let response = &body["response"];
        assert_eq!(response["uid"], uid.as_str(), "{what}");
        assert_eq!(response["allowed"], true, "{what}");

        let expected = crate::support::mutate_in(
            &snapshot,
            &Input {
                operation: Operation::Create,
                namespace: "knative-serving",
                object,
            },
        )
        .unwrap()
        .unwrap();
        let warnings: Vec<String> = response["warnings"]
            .as_array()
            .map(|a| a.iter().map(|w| w.as_str().unwrap().to_string()).collect())
            .unwrap_or_default();
        assert_eq!(
            warnings,
            expected.lines(),
            "{what}: warnings are the engine's changes"
        );
        if expected.is_empty() {
            assert!(
                response.get("patch").is_none(),
                "{what}: no patch when nothing changes"
            );
            assert!(response.get("patchType").is_none(), "{what}");
            continue;
        }
        assert_eq!(response["patchType"], "JSONPatch", "{what}");
        let patch = decode_patch(response);
        let mut got = object.clone();
        json_patch::patch(&mut got, &patch).unwrap_or_else(|e| panic!("{what}: {e}"));
        let mut want = object.clone();
        json_patch::patch(&mut want, &expected.patch).unwrap();
        assert_eq!(
            got, want,
            "{what}: patched object equals the engine's result"
        );
    }
}

/// Over loopback TLS, HTTP/1.1 and h2 (negotiated by ALPN) carry exactly
/// the router's answer for every governed object.
#[tokio::test]
async fn http1_and_h2_carry_the_routers_answer() {
    let fx = Fixture::start().await;
    let mutate = Mutate::example();
    let objects: Vec<Value> = support::corpus::governed_objects()
        .into_iter()
        .map(|(_, object)| object)
        .collect();
    for proto in [Proto::Http1, Proto::H2] {
        let client = fx.client(proto);
        for (i, object) in objects.iter().enumerate() {
            let what = format!(
                "{proto:?} {}/{}",
                object["kind"].as_str().unwrap(),
                object["metadata"]["name"].as_str().unwrap()
            );
            let review = review(&format!("uid-{i}"), "CREATE", "knative-serving", object);
            let (status, body, version) = post(&client, &fx.url(), &review).await;
            let want_version = match proto {
                Proto::Http1 => reqwest::Version::HTTP_11,
                Proto::H2 => reqwest::Version::HTTP_2,
            };
            assert_eq!(version, want_version, "{what}: negotiated protocol");
            assert_eq!(
                (status, body),
                mutate.post(&review).await,
                "{what}: the router's answer"
            );
        }
    }
    fx.server.stop().await;
}

/// The engine contract for the README's example: the v1.23.0 controller
/// Deployment with examples/policy.yaml gets 3 replicas.
#[tokio::test]
async fn controller_deployment_gets_three_replicas() {
    let controller = fixture("Deployment", "knative-serving", "controller");
    let (status, body) = Mutate::example()
        .post(&review(
            "u-controller",
            "CREATE",
            "knative-serving",
            &controller,
        ))
        .await;
    assert_eq!(status, 200);
    let response = &body["response"];
    assert_eq!(response["patchType"], "JSONPatch", "{body}");
    let mut patched = controller.clone();
    json_patch::patch(&mut patched, &decode_patch(response)).unwrap();
    assert_eq!(patched["spec"]["replicas"], 3);
    assert!(!response["warnings"].as_array().unwrap().is_empty());
}

/// Every shipped example review (`examples/review*.json`) is answered like
/// the engine says: uid mirrored, a patch exactly when the engine changes something.
#[tokio::test]
async fn example_reviews_are_valid_reviews() {
    let mutate = Mutate::example();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_str().unwrap();
            name.starts_with("review") && name.ends_with(".json")
        })
        .collect();
    files.sort();
    assert!(files.len() >= 2, "{files:?}");
    for file in files {
        let review: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let (status, body) = mutate.post(&review).await;
        assert_eq!(status, 200, "{}: {body}", file.display());
        assert_eq!(body["response"]["uid"], review["request"]["uid"]);
        assert_eq!(body["response"]["allowed"], true);
        let object = &review["request"]["object"];
        let expected = crate::support::mutate_in(
            &example_snapshot(),
            &Input {
                operation: match review["request"]["operation"].as_str().unwrap() {
                    "CREATE" => Operation::Create,
                    _ => Operation::Update,
                },
                namespace: review["request"]["namespace"].as_str().unwrap(),
                object,
            },
        )
        .unwrap()
        .unwrap();
        assert!(
            !expected.is_empty(),
            "{}: the example shows a change",
            file.display()
        );
        let mut patched = object.clone();
        json_patch::patch(&mut patched, &decode_patch(&body["response"])).unwrap();
        let mut want = object.clone();
        json_patch::patch(&mut want, &expected.patch).unwrap();
        assert_eq!(patched, want, "{}", file.display());
    }
}

struct Bad {
    name: &'static str,
    method: reqwest::Method,
    path: &'static str,
    body: Vec<u8>,
    status: u16,
    message: &'static str,
}

#[tokio::test]
async fn bad_requests_get_json_errors() {
    let fx = Fixture::start().await;
    let big = {
        let mut v = b"{\"apiVersion\":\"admission.k8s.io/v1\",\"pad\":\"".to_vec();
        v.resize(7 * 1024 * 1024 + 10, b'a');
        v.extend_from_slice(b"\"}");
        v
    };
    let cases = vec![
        Bad {
            name: "body over 7 MiB",
            method: reqwest::Method::POST,
            path: "/mutate",
            body: big,
            status: 413,
            message: "larger than",
        },
        Bad {
            name: "not JSON",
            method: reqwest::Method::POST,
            path: "/mutate",
            body: b"hello".to_vec(),
            status: 400,
            message: "not JSON",
        },
        Bad {
            name: "JSON array",
            method: reqwest::Method::POST,
            path: "/mutate",
            body: b"[]".to_vec(),
            status: 400,
            message: "not an object",
        },
        Bad {
            name: "JSON but not an AdmissionReview",
            method: reqwest::Method::POST,
            path: "/mutate",
            body: br#"{"apiVersion":"v1","kind":"Pod"}"#.to_vec(),
            status: 400,
            message: "not an AdmissionReview",
        },
        Bad {
            name: "review without request",
            method: reqwest::Method::POST,
            path: "/mutate",
            body: br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
            status: 400,
            message: "no request",
        },
        Bad {
            name: "request without uid",
            method: reqwest::Method::POST,
            path: "/mutate",
            body: br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"operation":"CREATE"}}"#.to_vec(),
            status: 400,
            message: "uid",
        },
        Bad {
            name: "other path",
            method: reqwest::Method::POST,
            path: "/admit",
            body: b"{}".to_vec(),
            status: 404,
            message: "no such path",
        },
        Bad {
            name: "GET /mutate",
            method: reqwest::Method::GET,
            path: "/mutate",
            body: Vec::new(),
            status: 405,
            message: "not allowed",
        },
        Bad {
            name: "PUT /mutate",
            method: reqwest::Method::PUT,
            path: "/mutate",
            body: b"{}".to_vec(),
            status: 405,
            message: "not allowed",
        },
    ];
    for proto in [Proto::Http1, Proto::H2] {
        let client = fx.client(proto);
        for case in &cases {
            let url = format!("https://{SVC}:{}{}", fx.server.addr.port(), case.path);
            let resp = client
                .request(case.method.clone(), &url)
                .header("content-type", "application/json")
                .body(case.body.clone())
                .send()
                .await
                .unwrap_or_else(|e| panic!("{proto:?} {}: {e}", case.name));
            assert_eq!(
                resp.status().as_u16(),
                case.status,
                "{proto:?} {}",
                case.name
            );
            let body: Value = resp
                .json()
                .await
                .unwrap_or_else(|e| panic!("{proto:?} {}: JSON body: {e}", case.name));
            let message = body["message"].as_str().unwrap_or_default();
            assert!(
                message.contains(case.message),
                "{proto:?} {}: {message}",
                case.name
            );
            assert_eq!(body["code"], case.status, "{proto:?} {}", case.name);
        }
    }
    // The server is still healthy after all that; the API server's
    // `?timeout=10s` query is accepted.
    let controller = fixture("Deployment", "knative-serving", "controller");
    let (status, _, _) = post(
        &fx.client(Proto::Http1),
        &format!("{}?timeout=10s", fx.url()),
        &review("after", "CREATE", "knative-serving", &controller),
    )
    .await;
    assert_eq!(status, 200);
    let metrics = metrics_text(fx.server.metrics_addr).await;
    assert!(
        sample(
            &metrics,
            "knative_ha_webhook_http_errors_total{reason=\"payload_too_large\"}"
        )
        .unwrap_or(0.0)
            >= 2.0,
        "{metrics}"
    );
    fx.server.stop().await;
}

/// Reviews that are admitted unchanged: the response for each.
#[tokio::test]
async fn admitted_unchanged_cases() {
    let mutate = Mutate::example();
    let controller = fixture("Deployment", "knative-serving", "controller");

    // DELETE and CONNECT: allowed, no patch, no warning.
    for op in ["DELETE", "CONNECT"] {
        let (status, body) = mutate
            .post(&review(op, op, "knative-serving", &controller))
            .await;
        assert_eq!(status, 200);
        let r = &body["response"];
        assert_eq!(r["allowed"], true, "{op}");
        assert!(
            r.get("patch").is_none() && r.get("patchType").is_none(),
            "{op}: {body}"
        );
        assert!(r.get("warnings").is_none(), "{op}: {body}");
    }

    // A namespace without a policy: allowed, no patch, no warning.
    let mut elsewhere = controller.clone();
    elsewhere["metadata"]["namespace"] = json!("default");
    let (_, body) = mutate
        .post(&review("other", "CREATE", "default", &elsewhere))
        .await;
    let r = &body["response"];
    assert_eq!(r["allowed"], true);
    assert!(
        r.get("patch").is_none() && r.get("warnings").is_none(),
        "{body}"
    );

    // Namespace omitted in the request: taken from the object.
    let mut no_ns = review("no-ns", "CREATE", "knative-serving", &controller);
    no_ns["request"]
        .as_object_mut()
        .unwrap()
        .remove("namespace");
    let (status, body) = mutate.post(&no_ns).await;
    assert_eq!(status, 200);
    assert_eq!(body["response"]["uid"], "no-ns");

    // UPDATE is mutated like CREATE (same patch as CREATE for the same object).
    let (_, create) = mutate
        .post(&review("c", "CREATE", "knative-serving", &controller))
        .await;
    let (_, update) = mutate
        .post(&review("c", "UPDATE", "knative-serving", &controller))
        .await;
    assert_eq!(create["response"], update["response"]);
}

#[tokio::test]
async fn engine_error_is_admitted_with_a_warning_or_denied() {
    // An object that is not a JSON object makes the engine fail.
    let broken = json!(["not", "an", "object"]);
    let review_body = {
        let mut r = review(
            "broken",
            "CREATE",
            "knative-serving",
            &json!({"apiVersion": "apps/v1", "kind": "Deployment"}),
        );
        r["request"]["object"] = broken;
        r["request"]["kind"] = json!({"group": "apps", "version": "v1", "kind": "Deployment"});
        r
    };

    let allow = Mutate::example();
    let (status, body) = allow.post(&review_body).await;
    assert_eq!(status, 200);
    let r = &body["response"];
    assert_eq!(r["allowed"], true, "{body}");
    assert!(r.get("patch").is_none());
    let warning = r["warnings"][0].as_str().unwrap();
    assert!(warning.contains("could not compute"), "{warning}");
    let metrics = allow.metrics_text();
    assert_eq!(
        sample(
            &metrics,
            "knative_ha_webhook_requests_total{kind=\"Deployment\",operation=\"CREATE\",outcome=\"error_allowed\"}"
        ),
        Some(1.0),
        "{metrics}"
    );

    let deny = Mutate::new(
        PolicyStore::new(example_snapshot()),
        ReviewOptions {
            on_error: knative_ha_webhook::admission::OnError::Deny,
            ..ReviewOptions::default()
        },
    );
    let (status, body) = deny.post(&review_body).await;
    assert_eq!(status, 200);
    let r = &body["response"];
    assert_eq!(r["allowed"], false, "{body}");
    assert_eq!(r["status"]["code"], 500);
    assert!(r["status"]["message"].as_str().unwrap().contains("refused"));
}

#[tokio::test]
async fn unsynced_policy_admits_with_a_warning_and_is_not_ready() {
    let pki = Pki::new("ca");
    let secret = SecretDir::new(&pki.server_leaf("s"));
    let mut unsynced = example_snapshot();
    unsynced.synced = false;
    let store = PolicyStore::new(unsynced);
    let server = Running::start(Config::for_tests(
        secret.source(),
        PolicySource::Store(store.clone()),
    ))
    .await;
    let (code, body) = get_status(server.metrics_addr, "/readyz").await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("\"policySynced\":false"), "{body}");

    let client = client(&pki.ca_pem, server.addr, Proto::Http1, None);
    let controller = fixture("Deployment", "knative-serving", "controller");
    let (_, body, _) = post(
        &client,
        &mutate_url(server.addr),
        &review("u", "CREATE", "knative-serving", &controller),
    )
    .await;
    let r = &body["response"];
    assert_eq!(r["allowed"], true);
    assert!(r.get("patch").is_none(), "{body}");
    assert_eq!(r["warnings"], json!([NOT_SYNCED_WARNING]));

    store.publish(example_snapshot());
    let (code, body) = get_status(server.metrics_addr, "/readyz").await;
    assert_eq!(code, 200, "{body}");
    server.stop().await;
}

#[tokio::test]
async fn readiness_needs_a_certificate_and_fails_during_shutdown() {
    let pki = Pki::new("ca");
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("tls.crt");
    let key = dir.path().join("tls.key");
    let mut config = Config::for_tests(
        knative_ha_webhook::tls::TlsSource::Files {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: None,
        },
        PolicySource::File(example_policy_path()),
    );
    config.shutdown_delay = std::time::Duration::from_secs(2);
    let mut server = Running::start(config).await;
    let (code, body) = get_status(server.metrics_addr, "/readyz").await;
    assert_eq!(code, 503, "no certificate yet: {body}");
    assert!(body.contains("\"certificate\":false"), "{body}");
    let (code, _) = get_status(server.metrics_addr, "/healthz").await;
    assert_eq!(code, 200);

    let pair = pki.server_leaf("late");
    std::fs::write(&cert, &pair.cert_pem).unwrap();
    std::fs::write(&key, &pair.key_pem).unwrap();
    let m = server.metrics_addr;
    assert!(
        becomes_true(std::time::Duration::from_secs(10), || async move {
            get_status(m, "/readyz").await.0 == 200
        })
        .await,
        "ready once the certificate appears"
    );

    let controller = fixture("Deployment", "knative-serving", "controller");
    let h2 = client(&pki.ca_pem, server.addr, Proto::H2, None);
    let (status, _, version) = post(
        &h2,
        &mutate_url(server.addr),
        &review("h2-before", "CREATE", "knative-serving", &controller),
    )
    .await;
    assert_eq!((status, version), (200, reqwest::Version::HTTP_2));

    server.begin_shutdown();
    assert!(
        becomes_true(std::time::Duration::from_secs(10), || async move {
            get_status(m, "/readyz").await.0 == 503
        })
        .await,
        "not ready once shutting down"
    );
    // Still serving during the shutdown delay, also to the h2 client whose
    // connection got a GOAWAY.
    for _ in 0..3 {
        let (status, _, _) = post(
            &h2,
            &mutate_url(server.addr),
            &review("h2-during", "CREATE", "knative-serving", &controller),
        )
        .await;
        assert_eq!(status, 200);
    }
    let client = client(&pki.ca_pem, server.addr, Proto::Http1, None);
    let (status, _, _) = post(
        &client,
        &mutate_url(server.addr),
        &review("late", "CREATE", "knative-serving", &controller),
    )
    .await;
    assert_eq!(status, 200);
    let (_, body) = get_status(m, "/readyz").await;
    assert!(body.contains("\"shuttingDown\":true"), "{body}");
    server.stop().await;
}

#[tokio::test]
async fn metrics_expose_the_named_series_with_bounded_labels() {
    let fx = Fixture::start().await;
    let client = fx.client(Proto::Http1);
    let controller = fixture("Deployment", "knative-serving", "controller");
    post(
        &client,
        &fx.url(),
        &review("m1", "CREATE", "knative-serving", &controller),
    )
    .await;
    // An unknown kind and an odd one must not create new label values.
    let mut odd = review("m2", "CREATE", "knative-serving", &controller);
    odd["request"]["kind"]["kind"] = json!("SomethingNew-12345");
    post(&client, &fx.url(), &odd).await;

    let metrics = metrics_text(fx.server.metrics_addr).await;
    for name in [
        "knative_ha_webhook_requests_total{",
        "knative_ha_webhook_request_duration_seconds_bucket{",
        "knative_ha_webhook_policy_reloads_total{result=\"success\"}",
        "knative_ha_webhook_tls_reloads_total{result=\"success\"}",
        "knative_ha_webhook_certificate_expiry_timestamp_seconds ",
        "knative_ha_webhook_requests_in_flight ",
        "knative_ha_webhook_ready 1",
    ] {
        assert!(metrics.contains(name), "missing {name} in\n{metrics}");
    }
    assert!(!metrics.contains("SomethingNew"), "kind label is bounded");
    assert!(metrics.contains("kind=\"other\""), "{metrics}");
    let expiry = sample(
        &metrics,
        "knative_ha_webhook_certificate_expiry_timestamp_seconds",
    )
    .unwrap();
    assert_eq!(
        expiry, 67_090_118_400.0,
        "rcgen's default notAfter (4096-01-01)"
    );
    fx.server.stop().await;
}

/// An UPDATE carrying two objects of about 3 MiB each (under the 7 MiB limit).
#[tokio::test]
async fn large_update_review_is_answered() {
    let fx = Fixture::start().await;
    let mut controller = fixture("Deployment", "knative-serving", "controller");
    controller["metadata"]["annotations"] = json!({"pad": "a".repeat(3 * 1024 * 1024 - 4096)});
    let mut body = review("big", "UPDATE", "knative-serving", &controller);
    body["request"]["oldObject"] = controller.clone();
    let size = serde_json::to_vec(&body).unwrap().len();
    assert!(size > 6_000_000 && size < 7 * 1024 * 1024, "{size}");
    for proto in [Proto::Http1, Proto::H2] {
        let (status, resp, _) = post(&fx.client(proto), &fx.url(), &body).await;
        assert_eq!(status, 200, "{proto:?}");
        assert_eq!(resp["response"]["uid"], "big");
        let mut patched = controller.clone();
        json_patch::patch(&mut patched, &decode_patch(&resp["response"])).unwrap();
        assert_eq!(patched["spec"]["replicas"], 3, "{proto:?}");
    }
    fx.server.stop().await;
}
