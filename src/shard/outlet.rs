//! Where a shard's committed transfers go next, as the shard sees it. The
//! shard defines this interface and the relay implements it
//! (`relay::RelayOutlet`), so that a shard knows nothing of providers, of
//! the relay's queue or of how it is woken.

use std::time::{Duration, Instant};

use crate::domain::{ClientId, Transfer};

/// What a shard asks of settlement.
pub trait Outlet: Send + Sync + 'static {
    /// Room for a flush of `n` new transfers in this process's relay: the
    /// lease under which the flush writes their outbox rows claimed, or
    /// `None` to write them unclaimed (no relay here, or it holds enough).
    fn reserve(&self, n: usize) -> Option<Duration>;
    /// Gives back room reserved for `n` rows that were not written.
    fn release(&self, n: usize);
    /// Hands committed transfers whose rows the flush claimed to this
    /// process's relay. `claimed_at` is no later than Postgres's claim time.
    fn deliver(&self, transfers: Vec<Transfer>, claimed_at: Instant);
    /// Rows were committed unclaimed: some process's relay should look.
    fn wake(&self);
    /// `client`'s settlement lags: no new key of it is taken.
    fn lagging(&self, client: ClientId) -> bool;
}
