//! The OpenAPI 3.1 document, generated from the handlers' annotations.

use actix_web::HttpResponse;
use serde_json::Value;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::schemas::{CreateTransfer, OpsStatus};
use crate::domain::{FieldError, TransferStatus, TransferView};

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
    info(title = "payrail", description = "Payment/transfer engine: one intent, one transfer, one provider execution. Every error is `application/problem+json` (RFC 9457)."),
    paths(
        super::transfers::create, super::transfers::get, super::transfers::list,
        super::webhooks::create_endpoint, super::webhooks::list_endpoints,
        super::webhooks::delete_endpoint, super::webhooks::rotate_secret,
        super::webhooks::list_events, super::webhooks::redeliver,
        super::provider_notifications::receive,
        super::ops::healthz, super::ops::readyz, super::ops::metrics, serve,
    ),
    components(schemas(CreateTransfer, TransferView, TransferStatus, crate::domain::Anomaly, super::transfers::TransferList, super::problem::Problem, FieldError, OpsStatus,
        super::webhooks::CreateEndpoint, super::webhooks::CreatedEndpoint, super::webhooks::EndpointView, super::webhooks::EndpointList,
        super::webhooks::RotatedSecret, super::webhooks::EventView, super::webhooks::EventList, super::webhooks::DeliveryView,
        super::webhooks::Redelivery, crate::domain::webhook::EventType)),
    modifiers(&BearerAuth),
)]
pub struct ApiDoc;

/// Response headers the server always sends with the response they are
/// documented on. utoipa's header object cannot say `required`, so
/// [`document`] adds it.
const ALWAYS_SENT_HEADERS: [&str; 3] = ["Location", "Retry-After", "WWW-Authenticate"];

/// The answers every authenticated operation can give, documented once:
/// added by [`document`] to each operation that requires a bearer key,
/// unless the operation documents that status itself.
fn authenticated_responses() -> Value {
    let problem = serde_json::json!({
        "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}
    });
    let header = |description: &str| serde_json::json!({"schema": {"type": "integer", "format": "int32", "minimum": 0}, "description": description});
    serde_json::json!({
        "401": {
            "description": "unauthorized: missing, unknown or revoked API key",
            "content": problem,
            "headers": {"WWW-Authenticate": {"schema": {"type": "string"}, "description": "`Bearer`"}},
        },
        "429": {
            "description": "rate-limited",
            "content": problem,
            "headers": {"Retry-After": header("Seconds until the client's budget has room again")},
        },
        "503": {
            "description": "unavailable (Postgres failing) or overloaded (load shed)",
            "content": problem,
            "headers": {"Retry-After": header("Seconds to wait before retrying")},
        },
    })
}

/// The document as served: [`ApiDoc`] plus the answers every authenticated
/// operation shares, and what utoipa's header object cannot say:
/// `required: true` on the response headers that are always sent, so that
/// clients (and conformance tests) may rely on them, and the one value of
/// `Idempotent-Replayed`.
pub fn document() -> Value {
    let mut doc = serde_json::to_value(ApiDoc::openapi()).unwrap_or(Value::Null);
    let shared = authenticated_responses();
    if let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) {
        for operation in paths.values_mut().filter_map(Value::as_object_mut) {
            for op in operation.values_mut().filter_map(Value::as_object_mut) {
                if !op.contains_key("security") {
                    continue;
                }
                let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else {
                    continue;
                };
                for (status, response) in shared.as_object().into_iter().flatten() {
                    responses
                        .entry(status.clone())
                        .or_insert_with(|| response.clone());
                }
            }
        }
    }
    if let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) {
        for operation in paths.values_mut().filter_map(Value::as_object_mut) {
            for op in operation.values_mut() {
                let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else {
                    continue;
                };
                for response in responses.values_mut() {
                    let Some(headers) = response.get_mut("headers").and_then(Value::as_object_mut)
                    else {
                        continue;
                    };
                    for (name, header) in headers.iter_mut() {
                        if ALWAYS_SENT_HEADERS.contains(&name.as_str()) {
                            header["required"] = Value::Bool(true);
                        }
                        if name == "Idempotent-Replayed" {
                            header["schema"]["enum"] = serde_json::json!(["true"]);
                        }
                    }
                }
            }
        }
    }
    doc
}

/// This API's OpenAPI 3.1 document.
#[utoipa::path(get, path = "/openapi.json", tag = "operations", responses((status = 200, description = "OpenAPI 3.1 document", body = Object, content_type = "application/json")))]
pub async fn serve() -> HttpResponse {
    HttpResponse::Ok().json(document())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::schemas::IDEMPOTENCY_KEY_PATTERN;

    #[test]
    fn the_documented_key_pattern_is_the_tested_one() {
        let doc = document();
        let params = &doc["paths"]["/transfers"]["post"]["parameters"];
        let key = params
            .as_array()
            .and_then(|ps| ps.iter().find(|p| p["name"] == "Idempotency-Key"))
            .expect("Idempotency-Key is declared");
        assert_eq!(key["in"], "header");
        assert_eq!(key["required"], true);
        assert_eq!(key["schema"]["pattern"], IDEMPOTENCY_KEY_PATTERN);
    }

    #[test]
    fn always_sent_headers_are_required() {
        let doc = document();
        let created = &doc["paths"]["/transfers"]["post"]["responses"]["201"]["headers"];
        assert_eq!(created["Location"]["required"], true);
        assert!(created["Idempotent-Replayed"].get("required").is_none());
        assert_eq!(
            created["Idempotent-Replayed"]["schema"]["enum"],
            serde_json::json!(["true"])
        );
        let unauthorized = &doc["paths"]["/transfers"]["get"]["responses"]["401"]["headers"];
        assert_eq!(unauthorized["WWW-Authenticate"]["required"], true);
    }
}
