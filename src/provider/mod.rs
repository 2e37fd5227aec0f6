//! The downstream payment provider, seen from the engine: "execute this payout
//! under this business id". The relay depends only on the [`Provider`] trait;
//! [`http::HttpProvider`] speaks the wire protocol of docs/ARCHITECTURE.md.

pub mod http;

use std::time::Duration;

use futures::future::BoxFuture;
use uuid::Uuid;

/// One payout request. `transfer_id` is the business id: every attempt for one
/// transfer carries the same one, so an idempotent provider executes it once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Payout {
    /// The transfer id, sent as the provider's `Idempotency-Key`.
    pub transfer_id: Uuid,
    /// The client that created the transfer. Accounts are scoped by it at
    /// the provider (as Stripe Connect scopes them by `Stripe-Account`): the
    /// accounts a payout names are this client's, so no client can debit
    /// another's account, whatever id it names.
    pub account_owner: Uuid,
    /// Amount in the currency's minor units.
    pub amount: i64,
    /// ISO 4217 alphabetic code.
    pub currency: String,
    /// Account debited.
    pub source_account: String,
    /// Account credited.
    pub destination_account: String,
}

/// An answer from the provider about the payout: decided one way or the
/// other, accepted with the outcome to come (`Processing`), or, from a
/// lookup, executed and come back (`Returned`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderOutcome {
    /// Accepted; the provider reports the outcome later.
    Processing {
        /// The provider's reference, if it gave one.
        reference: Option<String>,
    },
    /// Executed, then returned by the receiving bank.
    Returned {
        /// The provider's reference, if it gave one.
        reference: Option<String>,
        /// Why it came back.
        reason: String,
    },
    /// The provider executed the payout.
    Succeeded {
        /// The provider's own reference for the payout.
        reference: String,
    },
    /// The provider refused the payout; retrying will not change that.
    Declined {
        /// Why, as the provider said it.
        reason: String,
    },
}

impl ProviderOutcome {
    /// The report this answer makes, as the status machine applies it.
    pub fn report(&self) -> crate::domain::ProviderReport {
        use crate::domain::{ProviderReport, ProviderText};
        let text = |s: &Option<String>| s.as_deref().map(ProviderText::clean);
        match self {
            Self::Processing { reference } => ProviderReport::Processing {
                reference: text(reference),
            },
            Self::Succeeded { reference } => ProviderReport::Succeeded {
                reference: Some(ProviderText::clean(reference)),
            },
            Self::Declined { reason } => ProviderReport::Declined {
                reason: ProviderText::clean(reason),
            },
            Self::Returned { reference, reason } => ProviderReport::Returned {
                reference: text(reference),
                reason: ProviderText::clean(reason),
            },
        }
    }
}

/// A call that did not produce a final answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// Timeout, connection error, `5xx`, `408`, `409`, `425`, `429`: no final
    /// answer; retry with the same business id.
    #[error("transient provider failure: {reason}")]
    Transient {
        /// What happened, for logs and the outbox row.
        reason: String,
        /// The provider's `Retry-After`, when it sent one.
        retry_after: Option<Duration>,
        /// The payout may have executed (a timeout, a dropped connection, a
        /// `5xx`): from now on a permanent `4xx` does not prove it did not.
        /// False only when the request provably was not acted on (connection
        /// refused, `408`, `425`, `429`).
        ambiguous: bool,
    },
    /// A `4xx` other than the transient ones, carrying the provider's own
    /// JSON error: the provider refused this payout.
    #[error("permanent provider failure: {reason}")]
    Permanent {
        /// What happened; becomes the transfer's `failure_reason`.
        reason: String,
    },
    /// Whoever answered is not the provider speaking about this payout:
    /// `401`, `403`, `404`, `405`, or a `4xx` without the provider's JSON
    /// error (a gateway's page, a wrong URL, a rotated credential). The
    /// engine is misconfigured; the row is parked for an operator, never
    /// finalized.
    #[error("provider misconfigured or unreachable as configured: {reason}")]
    Misconfigured {
        /// What came back, for the parked row.
        reason: String,
    },
}

/// Executes payouts. Implementations must be safe to call again with the same
/// [`Payout::transfer_id`] after any failure.
pub trait Provider: Send + Sync + 'static {
    /// Executes `payout` once under its business id.
    fn execute(&self, payout: Payout)
        -> BoxFuture<'static, Result<ProviderOutcome, ProviderError>>;

    /// Asks what became of the payout with this business id: its outcome,
    /// `None` only when the provider itself says it has no such payout, or
    /// an error when the provider cannot tell now (retry later).
    fn lookup(
        &self,
        transfer_id: Uuid,
    ) -> BoxFuture<'static, Result<Option<ProviderOutcome>, ProviderError>>;
}
