//! The request-parsing entry point of `POST /transfers`, as the handler runs
//! it: the `Idempotency-Key` header value, then the body (JSON, duplicate
//! keys, docs/API.md's field rules), then the fingerprint. Input: the header
//! value, a newline, the body. Any input must end in a value or a 4xx
//! problem; a panic or a 5xx is a bug.
#![no_main]

use actix_web::ResponseError;
use libfuzzer_sys::fuzz_target;
use payrail::api::body::parse_transfer;
use payrail::api::ApiError;
use payrail::domain::{Fingerprint, IdempotencyKey};

fuzz_target!(|data: &[u8]| {
    let (header, body) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    if let Err(e) = IdempotencyKey::parse(header) {
        assert!(ApiError::from(e).status_code().is_client_error());
    }
    match parse_transfer(body) {
        Ok(transfer) => {
            let again = parse_transfer(body).expect("parsing is deterministic");
            assert_eq!(Fingerprint::of_create(&transfer), Fingerprint::of_create(&again));
        }
        Err(e) => assert!(e.status_code().is_client_error(), "{e:?}"),
    }
});
