//! AdmissionReview wire protocol.
