//! The in-memory path from a flush to this process's relay.
//!
//! A flush may write its outbox rows already claimed by this process (attempt
//! 1 and a lease, in the same transaction as the transfers), and after the
//! commit hand them straight to the relay: no claim transaction, no NOTIFY,
//! no wait for a wake-up. The rows are still ordinary leased outbox rows, so
//! if this process dies, another one takes them over when the lease runs out.
//!
//! How many rows may be handed over and not yet settled is bounded
//! (`--relay-queue`); past it flushes write their rows due and unclaimed, and
//! relays claim them from Postgres as before.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::Addr;

use super::{LagGate, Relay, RelayNudge};
use crate::domain::{ClientId, Transfer};
use crate::provider::Payout;
use crate::queue::worker::{Deliver, HeldCount};
use crate::shard::Outlet;
use crate::store::outbox::ClaimedRow;

/// Count of rows handed over (or reserved for a flush in flight) and not yet
/// settled or dropped. Shared by the shards, which reserve, and the relay,
/// which releases.
#[derive(Debug, Default)]
pub struct HandoffCount(AtomicUsize);

impl HandoffCount {
    /// Rows held now.
    pub fn get(&self) -> usize {
        self.0.load(Ordering::Acquire)
    }

    /// Reserves `n` rows if that keeps the count within `max`.
    fn try_reserve(&self, n: usize, max: usize) -> bool {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                (held + n <= max).then_some(held + n)
            })
            .is_ok()
    }

    /// Gives back `n` rows (settled, dropped, or never written).
    pub fn release(&self, n: usize) {
        let before = self.0.fetch_sub(n, Ordering::AcqRel);
        assert!(before >= n, "released more handed-off rows than were held");
    }
}

impl HeldCount for HandoffCount {
    fn release(&self, n: usize) {
        HandoffCount::release(self, n);
    }
}

/// The shards' [`Outlet`]: rows a flush claimed go to this process's relay
/// (when it has one and room), rows written unclaimed wake every process's
/// relays, and a client's new keys are refused while its settlement lags.
pub struct RelayOutlet {
    /// `None` when this process has no relay.
    pub handoff: Option<Handoff>,
    /// Wakes the relays of every process.
    pub nudge: RelayNudge,
    /// Closed while settlement lags (`--outbox-lag-max`).
    pub lag: LagGate,
}

impl Outlet for RelayOutlet {
    fn reserve(&self, n: usize) -> Option<Duration> {
        let h = self.handoff.as_ref()?;
        h.try_reserve(n).then(|| h.lease())
    }

    fn release(&self, n: usize) {
        if let Some(h) = &self.handoff {
            h.release(n);
        }
    }

    fn deliver(&self, transfers: Vec<Transfer>, claimed_at: Instant) {
        match &self.handoff {
            Some(h) => h.deliver(transfers.iter().map(claimed_row).collect(), claimed_at),
            None => assert!(transfers.is_empty(), "rows are claimed only with a relay"),
        }
    }

    fn wake(&self) {
        self.nudge.nudge();
    }

    fn lagging(&self, client: ClientId) -> bool {
        self.lag.is_lagging(client)
    }
}

/// The outbox row a flush wrote claimed for a new transfer: its first claim.
fn claimed_row(transfer: &Transfer) -> ClaimedRow {
    let r = &transfer.request;
    ClaimedRow {
        payout: Payout {
            transfer_id: transfer.id,
            account_owner: transfer.client_id.0,
            amount: r.amount.minor_units(),
            currency: r.currency.code().to_owned(),
            source_account: r.source_account.as_str().to_owned(),
            destination_account: r.destination_account.as_str().to_owned(),
        },
        attempt: 1,
        budget_used: 1,
        ambiguous: false,
    }
}

/// What a shard needs to hand rows to the relay of its process.
#[derive(Clone)]
pub struct Handoff {
    relay: Addr<Relay>,
    count: Arc<HandoffCount>,
    relay_queue: usize,
    lease: Duration,
}

impl Handoff {
    /// A handoff to `relay`, holding at most `relay_queue` rows at once.
    pub fn new(
        relay: Addr<Relay>,
        count: Arc<HandoffCount>,
        relay_queue: usize,
        lease: Duration,
    ) -> Self {
        assert!(relay_queue > 0);
        Self {
            relay,
            count,
            relay_queue,
            lease,
        }
    }

    /// The lease the flush writes on rows it claims.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// Reserves room for a flush of `n` rows; false when the relay already
    /// holds too many (the flush then writes them unclaimed).
    pub fn try_reserve(&self, n: usize) -> bool {
        self.count.try_reserve(n, self.relay_queue)
    }

    /// Gives back reserved room for rows that were not written.
    pub fn release(&self, n: usize) {
        if n > 0 {
            self.count.release(n);
        }
    }

    /// Hands committed, claimed rows to the relay. `claimed_at` is taken
    /// before the flush began, so it is no later than Postgres's own claim
    /// time, and a lease measured from it ends no later than the real one.
    pub fn deliver(&self, rows: Vec<ClaimedRow>, claimed_at: Instant) {
        if rows.is_empty() {
            return;
        }
        // `do_send` ignores the mailbox bound on purpose: the rows are already
        // counted against `--relay-queue`, which is the real bound, and a
        // refused message would leave them idle until their lease ran out.
        for row in &rows {
            assert_eq!(row.attempt, 1, "a flush claims a row's first attempt");
        }
        self.relay.do_send(Deliver { rows, claimed_at });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_stay_within_the_bound() {
        let c = HandoffCount::default();
        assert!(c.try_reserve(6, 10));
        assert!(!c.try_reserve(5, 10));
        assert!(c.try_reserve(4, 10));
        c.release(10);
        assert_eq!(c.get(), 0);
    }

    #[test]
    #[should_panic(expected = "released more")]
    fn releasing_more_than_held_is_a_bug() {
        HandoffCount::default().release(1);
    }
}
