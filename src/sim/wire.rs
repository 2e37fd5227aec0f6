//! The sim's JSON: what `POST /payouts` accepts and what every route answers.
//!
//! Deliberately not shared with [`crate::provider::http`]: the sim stands in for
//! an external provider, so its own reading of docs/ARCHITECTURE.md catches a client that
//! drifts from the contract instead of agreeing with it by construction.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Longest account id accepted; matches the engine's own rule (docs/API.md) and
/// bounds the memory of one stored record.
pub const MAX_ACCOUNT_LEN: usize = 64;

/// The body of `POST /payouts` (docs/ARCHITECTURE.md). Unknown fields are rejected so that a
/// client sending something the contract does not know about is noticed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PayoutRequest {
    /// The business id; must equal the `Idempotency-Key`.
    pub transfer_id: Uuid,
    /// Whose accounts these are: the sim, like a provider with connected
    /// accounts, debits and credits `source_account` and
    /// `destination_account` within this owner's scope, never another's.
    pub account_owner: Uuid,
    /// Minor units, at least 1.
    pub amount: i64,
    /// Three upper-case ASCII letters.
    pub currency: String,
    /// Account debited.
    pub source_account: String,
    /// Account credited; a `decline` prefix forces a decline.
    pub destination_account: String,
}

impl PayoutRequest {
    /// Checks the field rules a real provider would enforce. Returns the first
    /// broken rule as `(field, message)`.
    pub fn validate(&self) -> Result<(), (&'static str, &'static str)> {
        if self.amount < 1 {
            return Err(("amount", "must be at least 1"));
        }
        if !(self.currency.len() == 3 && self.currency.bytes().all(|b| b.is_ascii_uppercase())) {
            return Err(("currency", "must be three upper-case letters"));
        }
        for (field, value) in [
            ("source_account", &self.source_account),
            ("destination_account", &self.destination_account),
        ] {
            if value.is_empty() || value.len() > MAX_ACCOUNT_LEN {
                return Err((field, "must be 1-64 characters"));
            }
        }
        Ok(())
    }
}

/// A decided payout, as answered to `POST /payouts` and replayed verbatim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum Answer {
    /// Executed: `{"status":"succeeded","reference":"sim_…","transfer_id":"…"}`.
    Succeeded {
        /// The sim's reference, `sim_<uuid>`.
        reference: String,
        /// Echo of the business id.
        transfer_id: Uuid,
    },
    /// Refused: `{"status":"declined","reason":"…","transfer_id":"…"}`.
    Declined {
        /// Why, e.g. `insufficient_funds`.
        reason: String,
        /// Echo of the business id.
        transfer_id: Uuid,
    },
    /// Accepted, decided later (`--async-rate`):
    /// `{"status":"processing","reference":"sim_…","transfer_id":"…"}`.
    Processing {
        /// The sim's reference, `sim_<uuid>`.
        reference: String,
        /// Echo of the business id.
        transfer_id: Uuid,
    },
}

impl Answer {
    /// The answer's `status`, `reference` and `reason`, for the record's top level.
    pub fn outcome(&self) -> (String, Option<String>, Option<String>) {
        match self {
            Answer::Succeeded { reference, .. } => {
                ("succeeded".into(), Some(reference.clone()), None)
            }
            Answer::Declined { reason, .. } => ("declined".into(), None, Some(reason.clone())),
            Answer::Processing { reference, .. } => {
                ("processing".into(), Some(reference.clone()), None)
            }
        }
    }
}

/// The body of every error answer: `{"error":"<slug>","message":"…"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Stable machine-readable slug, e.g. `idempotency_key_missing`.
    pub error: String,
    /// Human-readable detail.
    pub message: String,
}

/// `GET /stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Every `POST /payouts` received, whatever its fate (bad, failed, dropped).
    pub requests: u64,
    /// Payouts decided for the first time (succeeded or declined). Equals
    /// `distinct_ids` exactly when idempotency holds.
    pub executions: u64,
    /// Repeats answered from the store without executing.
    pub replays: u64,
    /// Distinct business ids stored.
    pub distinct_ids: u64,
    /// Executions that ended declined (by prefix or `--decline-rate`).
    pub declined: u64,
    /// `503`s injected by `--fail-rate`.
    pub injected_failures: u64,
    /// Connections dropped after execution by `--ambiguous-rate`.
    pub ambiguous_drops: u64,
    /// TCP connections accepted, on every route: a client that keeps its
    /// connections alive opens about as many as it has requests in flight.
    pub connections: u64,
    /// Payouts answered `processing` (`--async-rate`).
    #[serde(default)]
    pub accepted_async: u64,
    /// Of those, the ones not yet decided.
    #[serde(default)]
    pub processing: u64,
    /// Succeeded payouts returned later (`--return-rate`).
    #[serde(default)]
    pub returned: u64,
    /// Notifications the receiver accepted (a duplicate counts twice).
    #[serde(default)]
    pub notifications_sent: u64,
    /// Notifications never sent (`--notify-drop-rate`).
    #[serde(default)]
    pub notifications_dropped: u64,
    /// Notifications the receiver never accepted, every retry spent.
    #[serde(default)]
    pub notifications_failed: u64,
    /// Work still to come: decisions and returns not yet made, and
    /// notifications not yet accepted or given up. A verifier waits for 0.
    #[serde(default)]
    pub later_pending: u64,
}

/// `GET /payouts/{id}`: the request as first received, its decision, and how
/// often it was replayed. The decision is also at the top level, as the
/// `POST` answer has it (`status` with `reference` or `reason`), so a client
/// that lost an answer reads this record the same way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayoutRecord {
    /// The request that executed.
    #[serde(flatten)]
    pub request: PayoutRequest,
    /// `processing`, `succeeded`, `declined` or `returned`: where the payout
    /// is now (the stored answer keeps what the `POST` was told).
    pub status: String,
    /// The reference of a success.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reference: Option<String>,
    /// The reason of a decline.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub reason: Option<String>,
    /// The stored answer.
    pub answer: Answer,
    /// Repeats answered from the store.
    pub replays: u64,
    /// Whether the first answer was dropped by `--ambiguous-rate`.
    pub ambiguous: bool,
    /// When it executed, RFC 3339 UTC.
    pub executed_at: String,
    /// When its status last changed after the answer (decided or
    /// returned), RFC 3339 UTC.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub updated_at: Option<String>,
}
