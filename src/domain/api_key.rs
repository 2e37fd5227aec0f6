use std::fmt;

use rand::RngCore;
use sha2::{Digest, Sha256};
use uuid::Uuid;

/// Prefix of every API key, so a leaked key is recognisable in a secret scan.
const API_KEY_PREFIX: &str = "prk_";
/// Random bytes per key: 256 bits, above the spec's floor of 128.
const API_KEY_RANDOM_BYTES: usize = 32;

/// A tenant of the engine. Idempotency keys and transfers are scoped by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientId(pub Uuid);

impl fmt::Display for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A secret API key as shown to its owner once. Deliberately no `Debug` or
/// `Display`: it must never reach a log line by accident.
pub struct ApiKey(String);

/// SHA-256 of an API key: the only form Postgres ever holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ApiKeyHash(pub [u8; 32]);

impl ApiKey {
    /// A fresh key from the operating system's CSPRNG.
    pub fn generate() -> Self {
        let mut bytes = [0u8; API_KEY_RANDOM_BYTES];
        rand::rngs::OsRng.fill_bytes(&mut bytes);
        Self(format!("{API_KEY_PREFIX}{}", hex::encode(bytes)))
    }

    /// Wraps a key presented by a caller; it is only ever hashed.
    pub fn from_presented(raw: &str) -> Self {
        Self(raw.to_owned())
    }

    /// The key's hash, for lookup and storage.
    pub fn hash(&self) -> ApiKeyHash {
        ApiKeyHash(Sha256::digest(self.0.as_bytes()).into())
    }

    /// The secret itself, for the one place that prints it to its owner.
    pub fn expose_secret(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_are_distinct_and_hash_stably() {
        let a = ApiKey::generate();
        let b = ApiKey::generate();
        assert_ne!(a.expose_secret(), b.expose_secret());
        assert_eq!(
            a.expose_secret().len(),
            API_KEY_PREFIX.len() + 2 * API_KEY_RANDOM_BYTES
        );
        assert_eq!(a.hash(), ApiKey::from_presented(a.expose_secret()).hash());
        assert_ne!(a.hash(), b.hash());
    }
}
