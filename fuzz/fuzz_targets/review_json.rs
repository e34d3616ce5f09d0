//! Arbitrary JSON, half of it shaped like an AdmissionReview (the right
//! top-level and `request` keys holding arbitrary values), into
//! `admission::review`: no panic, a well-formed answer.
#![no_main]

use arbitrary::Unstructured;
use knative_ha_webhook_fuzz::{check_review, fuzzgen};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let value = if u.ratio(1, 2).unwrap_or(false) {
        fuzzgen::review_like(&mut u)
    } else {
        fuzzgen::json(&mut u, 5)
    };
    if let Ok(value) = value {
        check_review(&serde_json::to_vec(&value).expect("serialisable"));
    }
});
