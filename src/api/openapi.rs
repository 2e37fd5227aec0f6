//! The OpenAPI 3.1 document, generated from the handlers' annotations.

use std::collections::BTreeMap;

use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

use crate::domain::{FieldError, TransferStatus, TransferView};

/// The `POST /transfers` body, for the document only: the handler parses the
/// JSON itself so it can report every broken rule (see `domain::NewTransfer`).
#[derive(ToSchema, serde::Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
pub struct CreateTransfer {
    /// Minor units of the currency.
    #[schema(minimum = 1, maximum = 999_999_999_999_i64)]
    amount: i64,
    /// Active ISO 4217 code, upper case.
    #[schema(pattern = "^[A-Z]{3}$", example = "USD")]
    currency: String,
    /// Account debited.
    #[schema(pattern = "^[A-Za-z0-9_.:-]{1,64}$")]
    source_account: String,
    /// Account credited; must differ from `source_account`.
    #[schema(pattern = "^[A-Za-z0-9_.:-]{1,64}$")]
    destination_account: String,
    /// At most 140 characters.
    #[schema(max_length = 140)]
    description: Option<String>,
    /// At most 20 entries; keys 1-40, values up to 500 characters.
    metadata: Option<BTreeMap<String, String>>,
}

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}

/// The document served at `/openapi.json`.
#[derive(OpenApi)]
#[openapi(
    info(title = "payrail", description = "Payment/transfer engine: one intent, one transfer, one provider execution."),
    paths(
        super::transfers::create, super::transfers::get, super::transfers::list,
        super::ops::healthz, super::ops::readyz, super::ops::metrics, super::ops::openapi,
    ),
    components(schemas(CreateTransfer, TransferView, TransferStatus, super::transfers::TransferList, super::problem::Problem, FieldError)),
    modifiers(&BearerAuth),
)]
pub struct ApiDoc;
