//! Types that are valid by construction. Each `parse` rejects bad input once,
//! at the edge; everything past the HTTP layer takes these and never re-checks.

mod account;
mod amount;
mod api_key;
mod currency;
mod fingerprint;
mod idempotency_key;
mod transfer;

pub use account::AccountId;
pub use amount::Amount;
pub use api_key::{ApiKey, ApiKeyHash, ClientId};
pub use currency::Currency;
pub use fingerprint::Fingerprint;
pub use idempotency_key::{IdempotencyKey, IdempotencyKeyError};
pub use transfer::{
    now_micros, Description, FieldError, Metadata, NewTransfer, Transfer, TransferStatus,
    TransferView, FIELDS as TRANSFER_FIELDS,
};
