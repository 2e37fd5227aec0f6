//! Types that are valid by construction. Each `parse` rejects bad input once,
//! at the edge; everything past the HTTP layer takes these and never re-checks.

mod account;
mod amount;
mod api_key;
mod currency;
mod fingerprint;
mod idempotency_key;
mod operator;
mod provider_text;
mod report;
mod transfer;
pub mod webhook;

pub use account::AccountId;
pub use amount::Amount;
pub use api_key::{ApiKey, ApiKeyHash, ClientId};
pub use currency::Currency;
pub use fingerprint::{BodyDigest, Fingerprint};
pub use idempotency_key::{IdempotencyKey, IdempotencyKeyError};
pub use operator::{secrets_match, ConsoleSecret, ConsoleSecretHash};
pub use provider_text::{ProviderText, PROVIDER_TEXT_CHARS_MAX};
pub use report::{Effect, ProviderReport};
/// docs/API.md's limits on a transfer's free-form fields.
pub mod transfer_limits {
    pub use super::transfer::{
        DESCRIPTION_LEN_MAX, METADATA_ENTRIES_MAX, METADATA_KEY_LEN_MAX, METADATA_VALUE_LEN_MAX,
    };
}
pub use transfer::{
    now_micros, Anomaly, Description, FieldError, Metadata, NewTransfer, Transfer, TransferStatus,
    TransferView, FIELDS as TRANSFER_FIELDS,
};
