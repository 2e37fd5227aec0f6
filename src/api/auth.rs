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
            let cache = &state.auth_cache;
            let client = match cache.get(&hash) {
                Some(client) => client,
                None if cache.is_unknown(&hash) => return Err(ApiError::Unauthorized),
                // A key no cache knows costs a query: bounded per process,
                // since strangers choose such keys.
                None if !state.auth_lookups.check() => return Err(ApiError::Overloaded),
                None => {
                    let since = cache.generation();
                    // On the authentication pool: a flood of unknown keys
                    // never takes the connections that write transfers.
                    match state.store.authenticate(&hash).await? {
                        Some(client) => {
                            cache.put(&hash, client, since);
                            client
                        }
                        None => {
                            cache.put_unknown(&hash);
                            return Err(ApiError::Unauthorized);
                        }
                    }
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
