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

/// SHA-256 of a request body's exact bytes. Equal digests mean equal bytes,
/// hence the same parsed request and the same [`Fingerprint`]: a replay that
/// repeats its first attempt's bytes can be answered without parsing them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BodyDigest([u8; 32]);

impl BodyDigest {
    /// Digests a body as it arrived.
    pub fn of(body: &[u8]) -> Self {
        Self(Sha256::digest(body).into())
    }
}

/// A JSON array in a fixed order: JSON escaping makes it unambiguous (no
/// separator can be forged from inside a value), and metadata is a sorted map.
/// Serialized from a tuple rather than a `serde_json::Value`, which would cost
/// an allocation per field; the bytes are the same, and must stay the same:
/// fingerprints stored in Postgres are compared with new ones.
fn canonical_form(method: &str, path: &str, t: &NewTransfer) -> Vec<u8> {
    let form = (
        method,
        path,
        t.amount.minor_units(),
        t.currency.code(),
        t.source_account.as_str(),
        t.destination_account.as_str(),
        t.description.as_ref().map(|d| d.as_str()),
        t.metadata.entries(),
    );
    serde_json::to_vec(&form).expect("a tuple of strings, numbers and a string map serializes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

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
    fn the_canonical_form_keeps_the_bytes_of_the_json_array_it_was_first_built_as() {
        let bodies = [
            BASE,
            r#"{"amount":1,"currency":"JPY","source_account":"a","destination_account":"b"}"#,
            r#"{"amount":7,"currency":"EUR","source_account":"a:b","destination_account":"c.d",
                "description":"quote \" backslash \\ é \u0001","metadata":{"z":"1","a":"\n"}}"#,
        ];
        for body in bodies {
            let v: Value = serde_json::from_str(body).unwrap();
            let t = NewTransfer::parse(v.as_object().unwrap()).unwrap();
            let first_form = json!([
                "POST",
                "/transfers",
                t.amount.minor_units(),
                t.currency.code(),
                t.source_account.as_str(),
                t.destination_account.as_str(),
                t.description.as_ref().map(|d| d.as_str()),
                t.metadata.entries(),
            ])
            .to_string();
            assert_eq!(
                canonical_form("POST", "/transfers", &t),
                first_form.into_bytes(),
                "{body}"
            );
        }
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
