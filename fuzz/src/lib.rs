//! What the fuzz targets share: the corpus of real Knative objects and
//! reviews, the input generators and the properties every answer must have
//! (the same files the robustness tests in `tests/robustness_*.rs` use).

#[path = "../../benches/support/corpus.rs"]
pub mod corpus;
#[path = "../../benches/support/fuzzgen.rs"]
pub mod fuzzgen;
