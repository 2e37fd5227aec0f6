use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use super::NewTransfer;

/// SHA-256 of a request's canonical form: method, path and the validated
/// fields in a fixed order. Two requests with the same fingerprint ask for the
/// same thing, whatever their JSON's field order or whitespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint(pub [u8; 32]);

impl Fingerprint {
    /// Fingerprints a validated `POST /transfers` request.
    pub fn of_create(transfer: &NewTransfer) -> Self {
        Self::of("POST", "/transfers", transfer)
    }

    fn of(method: &str, path: &str, t: &NewTransfer) -> Self {
        Self(Sha256::digest(canonical_form(method, path, t)).into())
    }

    /// Rebuilds a fingerprint read back from Postgres.
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Self)
    }
}

/// A JSON array in a fixed order: JSON escaping makes it unambiguous (no
/// separator can be forged from inside a value), and metadata is a sorted map.
fn canonical_form(method: &str, path: &str, t: &NewTransfer) -> Vec<u8> {
    let form: Value = json!([
        method,
        path,
        t.amount.minor_units(),
        t.currency.code(),
        t.source_account.as_str(),
        t.destination_account.as_str(),
        t.description.as_ref().map(|d| d.as_str()),
        t.metadata.entries(),
    ]);
    form.to_string().into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(body: &str) -> Fingerprint {
        let v: Value = serde_json::from_str(body).unwrap();
        Fingerprint::of_create(&NewTransfer::parse(v.as_object().unwrap()).unwrap())
    }

    const BASE: &str = r#"{"amount":100,"currency":"USD","source_account":"a","destination_account":"b","description":"x","metadata":{"k1":"v1","k2":"v2"}}"#;

    #[test]
    fn field_order_and_whitespace_do_not_matter() {
        let reordered = r#" { "metadata" : { "k2":"v2", "k1":"v1" },
            "destination_account":"b", "description":"x", "currency":"USD", "source_account":"a", "amount": 100 } "#;
        assert_eq!(fp(BASE), fp(reordered));
    }

    #[test]
    fn every_value_matters() {
        let changes = [
            ("100", "101"),
            ("USD", "EUR"),
            (r#""a""#, r#""a2""#),
            (r#""b""#, r#""b2""#),
            (r#""x""#, r#""y""#),
            (r#""v1""#, r#""v9""#),
            (r#""k2""#, r#""k3""#),
        ];
        for (from, to) in changes {
            let changed = BASE.replacen(from, to, 1);
            assert_ne!(fp(BASE), fp(&changed), "{from} -> {to}");
        }
        let no_description = BASE.replace(r#","description":"x""#, "");
        assert_ne!(fp(BASE), fp(&no_description));
    }

    #[test]
    fn method_and_path_are_part_of_it() {
        let v: Value = serde_json::from_str(BASE).unwrap();
        let t = NewTransfer::parse(v.as_object().unwrap()).unwrap();
        assert_ne!(
            Fingerprint::of("POST", "/transfers", &t),
            Fingerprint::of("PUT", "/transfers", &t)
        );
        assert_ne!(
            Fingerprint::of("POST", "/transfers", &t),
            Fingerprint::of("POST", "/other", &t)
        );
    }
}
