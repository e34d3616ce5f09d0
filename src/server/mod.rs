//! The HTTPS admission server's transport: listeners, connections and
//! their limits, the routes (`POST /mutate`, `POST /validate`) and the
//! probes. It serves what it is given: the application ([`crate::app`])
//! picks the policy source, the certificate and the reconciler.
//!
//! - [`router`]: the HTTPS routes alone, for in-process tests.
//! - [`Listeners`]: both listeners bound; [`Listeners::serve`] starts them
//!   and [`Serving`]'s steps stop them.

mod answered;
mod budget;
mod conn;
mod limits;
mod listener;
pub mod probes;
mod routes;
mod serving;
mod slots;
mod stall;

use std::net::SocketAddr;

pub use answered::http_answer;
pub use budget::{Budget, DEFAULT_BUDGET_BYTES, DEFAULT_BUDGET_WAIT};
pub use limits::Limits;
pub use routes::{AppState, router, router_with_budget};
pub use serving::{Listeners, Serving, Settings};

/// Why a listener could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("binding {what} {addr}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        #[source]
        error: std::io::Error,
    },
}

/// Runs its closure when dropped (a guard that also holds when a future is
/// abandoned mid-way).
pub(crate) struct OnDrop<F: FnMut()>(F);

impl<F: FnMut()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}
