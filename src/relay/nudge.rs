//! Wakes the relays of every process (a NOTIFY on the outbox channel) after
//! flushes committed outbox rows that no relay has claimed.
//!
//! Why not a NOTIFY inside each flush: it makes the flush's COMMIT take the
//! database-wide lock on the notification queue, so two overlapping
//! flushes commit one after the other, and Postgres then signals every
//! backend that listens on any channel (what that cost is measured in
//! docs/BENCHMARKS.md). Here one NOTIFY, in a transaction of its own,
//! answers all the flushes of an interval; it is sent after they committed,
//! so a woken relay finds their rows. A relay that misses it (Postgres was
//! down) still polls every `--relay-poll`.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use crate::store::OutboxStore;

/// What flushes use to ask for a wake-up. Cheap to clone.
#[derive(Clone)]
pub struct RelayNudge {
    wanted: Arc<Notify>,
}

impl RelayNudge {
    /// Starts the notifier on the current runtime: one NOTIFY at most every
    /// `interval`, and none without a nudge.
    pub fn start(outbox: OutboxStore, interval: Duration) -> Self {
        let wanted = Arc::new(Notify::new());
        tokio::spawn(notify_when_wanted(outbox, wanted.clone(), interval));
        Self { wanted }
    }

    /// Asks for one NOTIFY soon. Only after the rows are committed: the
    /// NOTIFY that answers may go out at once.
    pub fn nudge(&self) {
        self.wanted.notify_one();
    }
}

async fn notify_when_wanted(outbox: OutboxStore, wanted: Arc<Notify>, interval: Duration) {
    let wakeups = metrics::counter!("payrail_relay_wakeups_total");
    loop {
        // With nobody waiting, `notify_one` keeps one permit: the nudges of
        // a whole interval come down to the next NOTIFY.
        wanted.notified().await;
        match outbox.wake_relays().await {
            Ok(()) => wakeups.increment(1),
            Err(e) => tracing::warn!(error = %e, "could not wake the relays; they poll instead"),
        }
        tokio::time::sleep(interval).await;
    }
}
