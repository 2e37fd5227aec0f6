//! Operators of the console: a trust domain apart from clients. Their
//! tokens and the console's session secrets are shown once and stored only
//! as SHA-256.

use rand::RngCore;
use sha2::{Digest, Sha256};

/// Prefix of every operator token: told apart from an API key (`prk_`) at
/// a glance and in a secret scan.
const OPERATOR_TOKEN_PREFIX: &str = "pro_";
/// Random bytes per token or session secret: 256 bits.
const SECRET_RANDOM_BYTES: usize = 32;

/// An operator's token as shown once by `payrail operator create`, or a
/// session secret as set in the console's cookie. Deliberately no `Debug`
/// or `Display`: it must never reach a log line by accident.
pub struct ConsoleSecret(String);

/// SHA-256 of a [`ConsoleSecret`]: the only form Postgres holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleSecretHash(pub [u8; 32]);

impl ConsoleSecret {
    /// A fresh operator token from the operating system's CSPRNG.
    pub fn operator_token() -> Self {
        Self(format!("{OPERATOR_TOKEN_PREFIX}{}", random_hex()))
    }

    /// A fresh session secret (or CSRF token).
    pub fn session() -> Self {
        Self(random_hex())
    }

    /// Wraps a secret presented by a browser; it is only ever hashed or
    /// compared.
    pub fn from_presented(raw: &str) -> Self {
        Self(raw.trim().to_owned())
    }

    /// The secret's hash, for lookup and storage.
    pub fn hash(&self) -> ConsoleSecretHash {
        ConsoleSecretHash(Sha256::digest(self.0.as_bytes()).into())
    }

    /// The secret itself, for the one place that hands it to its owner.
    pub fn expose_secret(&self) -> &str {
        &self.0
    }
}

fn random_hex() -> String {
    let mut bytes = [0u8; SECRET_RANDOM_BYTES];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// Compares two secrets in time that depends on their lengths only, so a
/// CSRF token cannot be guessed byte by byte from response times.
pub fn secrets_match(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_distinct_prefixed_and_hash_stably() {
        let a = ConsoleSecret::operator_token();
        let b = ConsoleSecret::operator_token();
        assert_ne!(a.expose_secret(), b.expose_secret());
        assert!(a.expose_secret().starts_with("pro_"));
        assert_eq!(
            a.hash(),
            ConsoleSecret::from_presented(&format!("{}\n", a.expose_secret())).hash()
        );
        assert_ne!(a.hash(), b.hash());
    }

    #[test]
    fn secrets_match_only_when_equal() {
        assert!(secrets_match("abc", "abc"));
        assert!(!secrets_match("abc", "abd"));
        assert!(!secrets_match("abc", "abcd"));
        assert!(!secrets_match("", "a"));
    }
}
