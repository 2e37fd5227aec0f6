//! `POST /provider/notifications`: the provider's signed reports of payout
//! outcomes. No client authentication: the Standard Webhooks signature,
//! made with a secret only the provider and this engine share, is the
//! authentication. `204` once recorded, also for a repeat and for an
//! unknown transfer (the provider has nothing to fix by sending it again).

use std::time::SystemTime;

use actix_web::{web, HttpRequest, HttpResponse};

use super::{body, ApiError, AppState};
use crate::outcome::notifications::{IntakeError, Refusal};

fn header<'a>(req: &'a HttpRequest, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

/// Verifies, records and applies one notification.
#[utoipa::path(
    post,
    path = "/provider/notifications",
    tag = "provider",
    request_body(content = String, description = "`{\"type\": \"payout.updated\", \"data\": {\"transfer_id\", \"status\", \"reference\", \"reason\"}}`, signed with Standard Webhooks headers"),
    responses(
        (status = 204, description = "Recorded (also a repeat, or about an unknown transfer)"),
        (status = 400, description = "Signed, but not a notification", body = crate::api::problem::Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing or bad signature, or a timestamp more than the tolerance off", body = crate::api::problem::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No notification secret is configured", body = crate::api::problem::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body too large", body = crate::api::problem::Problem, content_type = "application/problem+json"),
        (status = 503, description = "Not recorded; send it again", body = crate::api::problem::Problem, content_type = "application/problem+json"),
    ),
)]
pub async fn receive(
    req: HttpRequest,
    payload: web::Payload,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ApiError> {
    let Some(intake) = &state.notifications else {
        return Err(ApiError::NotFound);
    };
    let body =
        body::read_limited(&req, payload, intake.body_max(), state.body_read_timeout).await?;
    let notification = intake
        .verifier()
        .verify(
            header(&req, "webhook-id"),
            header(&req, "webhook-timestamp"),
            header(&req, "webhook-signature"),
            &body,
            SystemTime::now(),
        )
        .map_err(|r| {
            intake.count_refusal(&r);
            match r {
                Refusal::Unauthenticated(why) => ApiError::NotificationUnauthenticated(why),
                Refusal::Malformed(why) => ApiError::NotificationMalformed(why),
            }
        })?;
    match intake.submit(notification).await {
        Ok(()) => Ok(HttpResponse::NoContent().finish()),
        Err(IntakeError::Full) => Err(ApiError::Overloaded),
        Err(IntakeError::Unavailable) => Err(ApiError::Unavailable),
    }
}
