//! The one leased work queue, seen from its workers. The outbox (provider
//! calls) and webhook deliveries are both queues of due rows that a worker
//! claims with a lease, works on, and settles: done, due again after a
//! backoff, or dead once its retry budget is spent. Their SQL is one set of
//! statements built per table (`store::queue`); when a failed row is due
//! again is one [`RetryPolicy`]; how rows are claimed, worked on, settled
//! and drained is one [`worker::Worker`], each queue saying only what its
//! work is ([`worker::Work`]); how long a claim leaves to start work is one
//! [`window::call_window`]. What a worker holds is served round-robin per
//! group (the relay's: per client), [`pending::Pending`].

pub mod backoff;
pub mod pending;
pub mod window;
pub mod worker;

pub use backoff::{Backoff, RetryPolicy};
