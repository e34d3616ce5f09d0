//! Real AdmissionReviews (every governed Knative v1.23.0 object, CREATE,
//! UPDATE and DELETE, governed and ungoverned namespace) with one to four
//! fields replaced, removed, retyped or added, into `admission::review`: no
//! panic, a well-formed answer, patches only where a policy governs and
//! always applicable.
#![no_main]

use std::sync::LazyLock;

use arbitrary::Unstructured;
use knative_ha_webhook_fuzz::{check_review, corpus, fuzzgen};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

static REVIEWS: LazyLock<Vec<Value>> = LazyLock::new(|| {
    let mut out = Vec::new();
    for (label, object) in corpus::governed_objects() {
        for op in ["CREATE", "UPDATE", "DELETE"] {
            for ns in [corpus::GOVERNED, corpus::UNGOVERNED] {
                out.push(corpus::review(
                    &format!("{label}-{op}-{ns}"),
                    op,
                    ns,
                    &object,
                ));
            }
        }
    }
    out
});

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(base) = u.choose(&REVIEWS) else {
        return;
    };
    let prefix = if u.ratio(4, 5).unwrap_or(true) {
        "/request"
    } else {
        ""
    };
    if let Ok(review) = fuzzgen::mutate(&mut u, base, prefix) {
        check_review(&serde_json::to_vec(&review).expect("serialisable"));
    }
});
