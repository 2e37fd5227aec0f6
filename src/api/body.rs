//! Turning a raw request into a valid value ([`NewTransfer`], [`NewEndpoint`]):
//! headers first, then a bounded body read, then JSON, then the field rules.

use std::time::Duration;

use actix_web::http::header;
use actix_web::{web, HttpRequest};
use futures::StreamExt;
use serde_json::{Map, Value};

use super::strict_json::StrictValue;
use super::ApiError;
use crate::domain::webhook::{AddressPolicy, EndpointUrl};
use crate::domain::{Description, FieldError, IdempotencyKey, IdempotencyKeyError, NewTransfer};

/// The request's idempotency key; exactly one header must be present.
pub fn idempotency_key(req: &HttpRequest) -> Result<IdempotencyKey, ApiError> {
    let mut values = req.headers().get_all("idempotency-key");
    let value = values.next().ok_or(ApiError::IdempotencyKeyMissing)?;
    if values.next().is_some() {
        return Err(IdempotencyKeyError::Repeated.into());
    }
    Ok(IdempotencyKey::parse(value.as_bytes())?)
}

/// `application/json`, with or without parameters such as `charset`.
pub fn require_json(req: &HttpRequest) -> Result<(), ApiError> {
    let essence = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(str::trim);
    match essence {
        Some(t) if t.eq_ignore_ascii_case("application/json") => Ok(()),
        _ => Err(ApiError::UnsupportedMediaType),
    }
}

/// Reads at most `limit` bytes within `timeout`; a larger body is refused
/// without reading the rest, whether or not it declared its length. The
/// timeout matters because actix's client request timeout covers only the
/// head: without it a client trickling its body would hold a worker's
/// connection and an attempt slot forever.
pub async fn read_limited(
    req: &HttpRequest,
    payload: web::Payload,
    limit: usize,
    timeout: Duration,
) -> Result<web::Bytes, ApiError> {
    tokio::time::timeout(timeout, read_body(req, payload, limit))
        .await
        .map_err(|_| ApiError::RequestTimeout(timeout))?
}

async fn read_body(
    req: &HttpRequest,
    mut payload: web::Payload,
    limit: usize,
) -> Result<web::Bytes, ApiError> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::PayloadTooLarge(limit));
    }
    let mut body = web::BytesMut::with_capacity(declared.unwrap_or(1024).min(limit));
    while let Some(chunk) = payload.next().await {
        let chunk = chunk
            .map_err(|e| ApiError::MalformedJson(format!("the body could not be read: {e}")))?;
        if body.len() + chunk.len() > limit {
            return Err(ApiError::PayloadTooLarge(limit));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// JSON (an object repeating a key is malformed), then docs/API.md's field rules.
pub fn parse_transfer(body: &[u8]) -> Result<NewTransfer, ApiError> {
    NewTransfer::parse(&json_object(body)?).map_err(ApiError::ValidationFailed)
}

/// A JSON object in which no key repeats.
fn json_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let StrictValue(value) =
        serde_json::from_slice(body).map_err(|e| ApiError::MalformedJson(e.to_string()))?;
    match value {
        Value::Object(o) => Ok(o),
        _ => Err(ApiError::ValidationFailed(vec![FieldError {
            field: "body".into(),
            message: "must be a JSON object".into(),
        }])),
    }
}

/// A valid `POST /webhook_endpoints` body.
#[derive(Debug)]
pub struct NewEndpoint {
    /// Where deliveries go.
    pub url: EndpointUrl,
    /// The owner's note.
    pub description: Option<Description>,
}

/// `{"url", "description"?}`: every broken rule is reported, unknown fields too.
pub fn parse_endpoint(body: &[u8], policy: AddressPolicy) -> Result<NewEndpoint, ApiError> {
    let object = json_object(body)?;
    let mut errors = Vec::new();
    let mut error = |field: &str, message: String| {
        errors.push(FieldError {
            field: field.into(),
            message,
        })
    };
    for unknown in object
        .keys()
        .filter(|k| !["url", "description"].contains(&k.as_str()))
    {
        error(unknown, "unknown field".into());
    }
    let url = match object.get("url") {
        Some(Value::String(raw)) => EndpointUrl::parse(raw, policy)
            .map_err(|e| error("url", e))
            .ok(),
        Some(_) => {
            error("url", "must be a string".into());
            None
        }
        None => {
            error("url", "is required".into());
            None
        }
    };
    let description = match object.get("description") {
        None | Some(Value::Null) => None,
        Some(Value::String(raw)) => Description::parse(raw)
            .map_err(|e| error("description", e))
            .ok(),
        Some(_) => {
            error("description", "must be a string".into());
            None
        }
    };
    match url {
        Some(url) if errors.is_empty() => Ok(NewEndpoint { url, description }),
        _ => Err(ApiError::ValidationFailed(errors)),
    }
}

/// Property tests over the request-parsing entry points: whatever arrives,
/// nothing panics and every rejection is a 4xx problem.
#[cfg(test)]
mod properties {
    use actix_web::ResponseError;
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::domain::Fingerprint;

    /// A valid account id (docs/API.md: 1–64 of `[A-Za-z0-9_.:-]`).
    fn account() -> impl Strategy<Value = String> {
        "[A-Za-z0-9_.:-]{1,64}"
    }

    /// A valid body as a JSON object, with all six fields.
    fn valid_body() -> impl Strategy<Value = Map<String, Value>> {
        (
            1i64..=999_999_999_999,
            prop::sample::select(vec!["USD", "EUR", "JPY", "GBP", "CHF"]),
            account(),
            account(),
            prop::option::of("[ -~]{0,140}"),
            prop::collection::btree_map("[a-z]{1,40}", "[ -~]{0,50}", 0..20),
        )
            .prop_filter("accounts must differ", |(_, _, s, d, _, _)| s != d)
            .prop_map(
                |(amount, currency, source, destination, description, metadata)| {
                    let body = json!({
                        "amount": amount,
                        "currency": currency,
                        "source_account": source,
                        "destination_account": destination,
                        "description": description,
                        "metadata": metadata,
                    });
                    match body {
                        Value::Object(o) => o,
                        _ => unreachable!("json! of an object"),
                    }
                },
            )
    }

    /// `object` as JSON text with its fields in `order` and `ws` between tokens.
    fn render(object: &Map<String, Value>, order: &[usize], ws: &str) -> String {
        let fields: Vec<(&String, &Value)> = object.iter().collect();
        let parts: Vec<String> = order
            .iter()
            .map(|&i| {
                let (k, v) = fields[i % fields.len()];
                format!("{ws}{}{ws}:{ws}{v}{ws}", Value::from(k.as_str()))
            })
            .collect();
        format!("{ws}{{{}}}{ws}", parts.join(","))
    }

    fn is_client_error(e: &ApiError) -> bool {
        e.status_code().is_client_error()
    }

    proptest! {
        #[test]
        fn any_header_bytes_parse_or_are_rejected_without_panic(raw in prop::collection::vec(any::<u8>(), 0..300)) {
            match IdempotencyKey::parse(&raw) {
                Ok(key) => {
                    let k = key.as_str();
                    prop_assert!((1..=255).contains(&k.len()));
                    prop_assert!(k.bytes().all(|b| (0x21..=0x7e).contains(&b)));
                }
                Err(e) => prop_assert!(is_client_error(&ApiError::from(e))),
            }
        }

        #[test]
        fn a_bare_key_and_its_quoted_form_are_the_same_key(k in "[!-~]{1,255}") {
            let quoted = format!("\"{}\"", k.replace('\\', "\\\\").replace('"', "\\\""));
            let bare = IdempotencyKey::parse(k.as_bytes());
            let from_quotes = IdempotencyKey::parse(quoted.as_bytes());
            if k.starts_with('"') {
                // A bare key cannot start with a quote: that is the quoted form.
                prop_assert!(from_quotes.is_ok());
            } else {
                prop_assert_eq!(bare.unwrap(), from_quotes.unwrap());
            }
        }

        #[test]
        fn any_body_bytes_are_a_transfer_or_a_4xx(raw in prop::collection::vec(any::<u8>(), 0..512)) {
            if let Err(e) = parse_transfer(&raw) {
                prop_assert!(is_client_error(&e));
            }
        }

        #[test]
        fn any_json_object_is_a_transfer_or_a_4xx(v in arbitrary_json()) {
            let text = v.to_string();
            if let Err(e) = parse_transfer(text.as_bytes()) {
                prop_assert!(is_client_error(&e));
            }
        }

        #[test]
        fn order_and_whitespace_never_change_the_fingerprint(
            body in valid_body(),
            order in Just((0..6).collect::<Vec<usize>>()).prop_shuffle(),
            ws in "[ \t\r\n]{0,3}",
        ) {
            let canonical = Value::Object(body.clone()).to_string();
            let shuffled = render(&body, &order, &ws);
            let a = parse_transfer(canonical.as_bytes()).unwrap();
            let b = parse_transfer(shuffled.as_bytes()).unwrap();
            prop_assert_eq!(Fingerprint::of_create(&a), Fingerprint::of_create(&b));
            // Stable: parsing the same text twice gives the same fingerprint.
            prop_assert_eq!(Fingerprint::of_create(&a), Fingerprint::of_create(&parse_transfer(canonical.as_bytes()).unwrap()));
        }

        #[test]
        fn a_changed_amount_changes_the_fingerprint(body in valid_body(), delta in 1i64..1000) {
            let a = parse_transfer(Value::Object(body.clone()).to_string().as_bytes()).unwrap();
            let mut changed = body;
            let amount = changed["amount"].as_i64().unwrap();
            let new_amount = if amount > 999_999_998_000 { amount - delta } else { amount + delta };
            changed.insert("amount".into(), Value::from(new_amount));
            let b = parse_transfer(Value::Object(changed).to_string().as_bytes()).unwrap();
            prop_assert_ne!(Fingerprint::of_create(&a), Fingerprint::of_create(&b));
        }
    }

    /// JSON of any shape, biased towards the field names the parser knows.
    fn arbitrary_json() -> impl Strategy<Value = Value> {
        let mut names = crate::domain::TRANSFER_FIELDS.to_vec();
        names.push("x");
        let names = prop::sample::select(names);
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>()
                .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            "\\PC{0,70}".prop_map(Value::from),
        ];
        let value = leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("\\PC{0,45}", inner, 0..25)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        });
        prop::collection::btree_map(names, value, 0..8)
            .prop_map(|m| Value::Object(m.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()))
    }
}
