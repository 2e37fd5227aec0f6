//! The sim's memory: one record per business id and the counters of `/stats`.
//!
//! Everything sits behind one mutex. The critical section is a hash lookup and
//! an insert, so contention is negligible at sim scale, and a single lock makes
//! the two properties that matter trivially true: "check, execute, store" is
//! atomic (two concurrent first requests execute once), and a `/stats` snapshot
//! is consistent (`executions == distinct_ids` is never torn).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use actix_web::web::Bytes;
use uuid::Uuid;

use super::wire::{Answer, PayoutRecord, PayoutRequest, Stats};

/// What [`SimState::admit`] did with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// First request for this id: it executed now; answer with these bytes.
    Executed(Bytes),
    /// A repeat with the same body: answer with the stored bytes.
    Replayed(Bytes),
    /// A repeat with a different body; nothing changed.
    Conflict,
    /// A new id, but the store holds `--max-payouts` records; nothing stored.
    Full,
}

struct Entry {
    record: PayoutRecord,
    // Serialized once at execution so every replay is byte-identical.
    answer_bytes: Bytes,
}

#[derive(Default)]
struct Inner {
    payouts: HashMap<Uuid, Entry>,
    stats: Stats,
}

/// The store and counters of one sim instance.
pub struct SimState {
    inner: Mutex<Inner>,
    max_payouts: usize,
}

impl SimState {
    /// An empty store that accepts at most `max_payouts` distinct ids.
    pub fn new(max_payouts: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            max_payouts,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // No code path panics halfway through an update, so a poisoned lock still
        // guards consistent data; keep serving rather than cascade the panic.
        crate::sync::lock(&self.inner)
    }

    /// Counts one accepted TCP connection.
    pub fn count_connection(&self) {
        self.lock().stats.connections += 1;
    }

    /// Counts one `POST /payouts`, before anything else can reject it.
    pub fn count_request(&self) {
        self.lock().stats.requests += 1;
    }

    /// Counts an answer injected by `--fail-rate` or `--repeat-reject-rate`.
    pub fn count_injected_failure(&self) {
        self.lock().stats.injected_failures += 1;
    }

    /// Marks `id`'s first answer as dropped by `--ambiguous-rate`.
    pub fn mark_ambiguous(&self, id: Uuid) {
        let mut inner = self.lock();
        inner.stats.ambiguous_drops += 1;
        if let Some(entry) = inner.payouts.get_mut(&id) {
            entry.record.ambiguous = true;
        }
    }

    /// Executes `request` once per `transfer_id`. `decide` runs only for the
    /// first request of an id, under the lock, so it runs at most once per id
    /// however many requests race.
    pub fn admit(
        &self,
        request: PayoutRequest,
        decide: impl FnOnce(&PayoutRequest) -> Answer,
    ) -> Admission {
        let mut inner = self.lock();
        let Inner { payouts, stats } = &mut *inner;
        if let Some(entry) = payouts.get_mut(&request.transfer_id) {
            // Compared field by field after parsing, so JSON key order and
            // whitespace do not count as a different body.
            if entry.record.request != request {
                return Admission::Conflict;
            }
            entry.record.replays += 1;
            stats.replays += 1;
            return Admission::Replayed(entry.answer_bytes.clone());
        }
        if payouts.len() >= self.max_payouts {
            return Admission::Full;
        }
        let answer = decide(&request);
        let answer_bytes = Bytes::from(serde_json::to_vec(&answer).expect("answer serializes"));
        stats.executions += 1;
        match answer {
            Answer::Declined { .. } => stats.declined += 1,
            Answer::Processing { .. } => {
                stats.accepted_async += 1;
                stats.processing += 1;
            }
            Answer::Succeeded { .. } => {}
        }
        let id = request.transfer_id;
        let (status, reference, reason) = answer.outcome();
        let record = PayoutRecord {
            request,
            status,
            reference,
            reason,
            answer,
            replays: 0,
            ambiguous: false,
            executed_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            updated_at: None,
        };
        payouts.insert(
            id,
            Entry {
                record,
                answer_bytes: answer_bytes.clone(),
            },
        );
        stats.distinct_ids = payouts.len() as u64;
        Admission::Executed(answer_bytes)
    }

    /// Decides a `processing` payout: declined with `decline`'s reason, else
    /// succeeded. Returns the record as it is now; `None` when `id` is not
    /// processing.
    pub fn decide(&self, id: Uuid, decline: Option<&str>) -> Option<PayoutRecord> {
        let mut inner = self.lock();
        let Inner { payouts, stats } = &mut *inner;
        let entry = payouts.get_mut(&id)?;
        if entry.record.status != "processing" {
            return None;
        }
        stats.processing -= 1;
        let r = &mut entry.record;
        match decline {
            Some(reason) => {
                stats.declined += 1;
                r.status = "declined".into();
                r.reason = Some(reason.to_owned());
            }
            None => r.status = "succeeded".into(),
        }
        r.updated_at = Some(now());
        Some(r.clone())
    }

    /// Returns a succeeded payout with `reason`; `None` when `id` is not
    /// succeeded.
    pub fn return_payout(&self, id: Uuid, reason: &str) -> Option<PayoutRecord> {
        let mut inner = self.lock();
        let Inner { payouts, stats } = &mut *inner;
        let entry = payouts.get_mut(&id)?;
        if entry.record.status != "succeeded" {
            return None;
        }
        stats.returned += 1;
        let r = &mut entry.record;
        r.status = "returned".into();
        r.reason = Some(reason.to_owned());
        r.updated_at = Some(now());
        Some(r.clone())
    }

    /// One more piece of later work (a decision, a return, a notification).
    pub fn later_started(&self) {
        self.lock().stats.later_pending += 1;
    }

    /// One piece of later work done.
    pub fn later_done(&self) {
        let mut inner = self.lock();
        assert!(
            inner.stats.later_pending > 0,
            "later work ends after it starts"
        );
        inner.stats.later_pending -= 1;
    }

    /// Counts notifications: accepted by the receiver, dropped, given up.
    pub fn count_notifications(&self, sent: u64, dropped: u64, failed: u64) {
        let mut inner = self.lock();
        inner.stats.notifications_sent += sent;
        inner.stats.notifications_dropped += dropped;
        inner.stats.notifications_failed += failed;
    }

    /// The record of `id`, if it executed.
    pub fn record(&self, id: Uuid) -> Option<PayoutRecord> {
        self.lock().payouts.get(&id).map(|e| e.record.clone())
    }

    /// A consistent snapshot of the counters.
    pub fn stats(&self) -> Stats {
        self.lock().stats
    }
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    fn request(id: Uuid, amount: i64) -> PayoutRequest {
        PayoutRequest {
            transfer_id: id,
            account_owner: Uuid::nil(),
            amount,
            currency: "JPY".into(),
            source_account: "a".into(),
            destination_account: "b".into(),
        }
    }

    fn succeed(r: &PayoutRequest) -> Answer {
        Answer::Succeeded {
            reference: format!("sim_{}", Uuid::new_v4()),
            transfer_id: r.transfer_id,
        }
    }

    #[test]
    fn first_executes_repeat_replays_same_bytes() {
        let s = SimState::new(10);
        let id = Uuid::new_v4();
        let Admission::Executed(first) = s.admit(request(id, 5), succeed) else {
            panic!()
        };
        let again = s.admit(request(id, 5), |_| panic!("must not execute twice"));
        assert_eq!(again, Admission::Replayed(first));
        let st = s.stats();
        assert_eq!((st.executions, st.replays, st.distinct_ids), (1, 1, 1));
        assert_eq!(s.record(id).unwrap().replays, 1);
    }

    #[test]
    fn different_body_conflicts_and_changes_nothing() {
        let s = SimState::new(10);
        let id = Uuid::new_v4();
        s.admit(request(id, 5), succeed);
        assert_eq!(s.admit(request(id, 6), succeed), Admission::Conflict);
        assert_eq!(s.record(id).unwrap().request.amount, 5);
        assert_eq!(s.stats().replays, 0);
    }

    #[test]
    fn full_store_refuses_new_ids_but_replays_old_ones() {
        let s = SimState::new(1);
        let id = Uuid::new_v4();
        s.admit(request(id, 5), succeed);
        assert_eq!(
            s.admit(request(Uuid::new_v4(), 5), succeed),
            Admission::Full
        );
        assert!(matches!(
            s.admit(request(id, 5), succeed),
            Admission::Replayed(_)
        ));
        assert_eq!(s.stats().distinct_ids, 1);
    }

    #[test]
    fn racing_first_requests_execute_once() {
        let s = Arc::new(SimState::new(10));
        let runs = Arc::new(AtomicUsize::new(0));
        let id = Uuid::new_v4();
        let threads: Vec<_> = (0..16)
            .map(|_| {
                let (s, runs) = (s.clone(), runs.clone());
                std::thread::spawn(move || {
                    s.admit(request(id, 5), |r| {
                        runs.fetch_add(1, Ordering::SeqCst);
                        succeed(r)
                    })
                })
            })
            .collect();
        let answers: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        let bytes: Vec<_> = answers
            .into_iter()
            .map(|a| match a {
                Admission::Executed(b) | Admission::Replayed(b) => b,
                other => panic!("{other:?}"),
            })
            .collect();
        assert!(bytes.windows(2).all(|w| w[0] == w[1]));
    }
}
