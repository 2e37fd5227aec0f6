use std::fmt;

/// Longest account id, in characters.
pub const ACCOUNT_ID_LEN_MAX: usize = 64;

/// An account id: 1–64 characters of `[A-Za-z0-9_.:-]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AccountId(String);

impl AccountId {
    /// Accepts 1–64 characters of `[A-Za-z0-9_.:-]`.
    pub fn parse(raw: &str) -> Result<Self, String> {
        let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':' | '-');
        if raw.is_empty() || raw.len() > ACCOUNT_ID_LEN_MAX || !raw.chars().all(ok_char) {
            return Err(format!(
                "must be 1 to {ACCOUNT_ID_LEN_MAX} characters of A-Z, a-z, 0-9, '_', '.', ':', '-'"
            ));
        }
        Ok(Self(raw.to_owned()))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AccountId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_alphabet() {
        assert!(AccountId::parse("acc_1.a:b-C").is_ok());
        assert!(AccountId::parse(&"a".repeat(64)).is_ok());
    }

    #[test]
    fn rejects_everything_else() {
        for bad in ["", "a b", "a/b", "ü", "a\u{0}", &"a".repeat(65)] {
            assert!(AccountId::parse(bad).is_err(), "{bad:?}");
        }
    }
}
