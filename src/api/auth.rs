//! `Authorization: Bearer <api_key>` → the calling client, within its rate limit.

use actix_web::dev::Payload;
use actix_web::http::header;
use actix_web::{web, FromRequest, HttpRequest};
use futures::future::LocalBoxFuture;

use super::{ApiError, AppState};
use crate::domain::{ApiKey, ClientId};

/// The authenticated caller. Taking it as a handler argument is what makes a
/// route require authentication.
#[derive(Debug, Clone, Copy)]
pub struct Caller(pub ClientId);

impl FromRequest for Caller {
    type Error = ApiError;
    type Future = LocalBoxFuture<'static, Result<Self, ApiError>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let state = req.app_data::<web::Data<AppState>>().cloned();
        let key = bearer_token(req).map(ApiKey::from_presented);
        Box::pin(async move {
            let (state, key) = match (state, key) {
                (Some(s), Some(k)) => (s, k),
                _ => return Err(ApiError::Unauthorized),
            };
            let hash = key.hash();
            let client = match state.auth_cache.get(&hash) {
                Some(client) => client,
                None => {
                    let client = state
                        .store
                        .authenticate(&hash)
                        .await?
                        .ok_or(ApiError::Unauthorized)?;
                    state.auth_cache.put(&hash, client);
                    client
                }
            };
            state
                .rate_limiter
                .check(client)
                .map_err(ApiError::RateLimited)?;
            Ok(Caller(client))
        })
    }
}

fn bearer_token(req: &HttpRequest) -> Option<&str> {
    let mut values = req.headers().get_all(header::AUTHORIZATION);
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    let (scheme, token) = value.to_str().ok()?.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}
