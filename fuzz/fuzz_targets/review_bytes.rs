//! Arbitrary bytes into `admission::review`: no panic, a well-formed answer.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    knative_ha_webhook_fuzz::check_review(data);
});
