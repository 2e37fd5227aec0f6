//! Who is signed in: the session cookie, the `Operator` extractor, and the
//! CSRF check of state-changing requests.

use actix_web::cookie::{Cookie, SameSite};
use actix_web::{dev::Payload, web, FromRequest, HttpRequest};
use futures::future::LocalBoxFuture;

use super::{ConsoleError, ConsoleState};
use crate::domain::{secrets_match, ConsoleSecret};
use crate::store::console::OperatorSession;

/// The session cookie: a random secret whose hash names the session.
pub const SESSION_COOKIE: &str = "payrail_console";
/// Before sign-in: the double-submit token the sign-in form must echo, so
/// another site cannot sign a browser in to an account of its choosing.
pub const SIGN_IN_COOKIE: &str = "payrail_console_sign_in";
/// Every console cookie is scoped to the console's paths.
const COOKIE_PATH: &str = "/console";

/// The signed-in operator of a request. Only the console's own cookie is
/// read: an `Authorization` header (a client's API key) opens nothing here.
pub struct Operator(pub OperatorSession);

impl FromRequest for Operator {
    type Error = ConsoleError;
    type Future = LocalBoxFuture<'static, Result<Self, Self::Error>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let secret = req.cookie(SESSION_COOKIE).map(|c| c.value().to_owned());
        let state = req.app_data::<web::Data<ConsoleState>>().cloned();
        Box::pin(async move {
            let state = state.expect("the console's state is registered with its routes");
            let Some(secret) = secret else {
                return Err(ConsoleError::NotSignedIn);
            };
            let hash = ConsoleSecret::from_presented(&secret).hash();
            match state.store.console().session(&hash).await? {
                Some(session) => Ok(Operator(session)),
                None => Err(ConsoleError::NotSignedIn),
            }
        })
    }
}

impl Operator {
    /// Refuses a state-changing request whose form does not carry this
    /// session's CSRF token.
    pub fn check_csrf(&self, presented: Option<&str>) -> Result<(), ConsoleError> {
        match presented {
            Some(token) if secrets_match(token, &self.0.csrf_token) => Ok(()),
            _ => Err(ConsoleError::Csrf),
        }
    }
}

/// A console cookie: `HttpOnly`, `SameSite=Strict`, and `Secure` unless the
/// browser reached us on a loopback name (a developer's machine has no
/// TLS; anywhere else the console is served behind TLS).
pub fn cookie(req: &HttpRequest, name: &'static str, value: String) -> Cookie<'static> {
    let mut c = Cookie::new(name, value);
    c.set_path(COOKIE_PATH);
    c.set_http_only(true);
    c.set_same_site(SameSite::Strict);
    c.set_secure(!on_loopback(req));
    c
}

/// A cookie that tells the browser to forget `name`.
pub fn removal(req: &HttpRequest, name: &'static str) -> Cookie<'static> {
    let mut c = cookie(req, name, String::new());
    c.make_removal();
    c
}

/// True when the `Host` the browser used is a loopback name or address.
fn on_loopback(req: &HttpRequest) -> bool {
    let info = req.connection_info();
    let host = info.host();
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(v6),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    name == "localhost"
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    #[test]
    fn cookies_are_secure_except_on_loopback() {
        for (host, secure) in [
            ("127.0.0.1:8080", false),
            ("localhost:8080", false),
            ("[::1]:8080", false),
            ("payouts.example.com", true),
            ("10.0.0.5:8080", true),
        ] {
            let req = TestRequest::default()
                .insert_header(("host", host))
                .to_http_request();
            let c = cookie(&req, SESSION_COOKIE, "x".into());
            assert_eq!(c.secure(), Some(secure), "{host}");
            assert_eq!(c.http_only(), Some(true));
            assert_eq!(c.same_site(), Some(SameSite::Strict));
        }
    }
}
