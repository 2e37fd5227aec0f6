//! [`HttpProvider`]: the [`Provider`] that speaks the provider protocol (docs/ARCHITECTURE.md) over HTTP/1.1.
//!
//! The transport (reqwest) and the decision "what does this answer mean for the
//! transfer" are kept apart: [`classify`] is a pure function of what came back,
//! so every row of the §6 outcome table is unit-tested without a socket.

use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use futures::FutureExt;
use reqwest::header::RETRY_AFTER;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{Payout, Provider, ProviderError, ProviderOutcome};

/// Idle keep-alive connections kept per provider host. Bounded so a burst of
/// concurrent payouts does not leave hundreds of idle sockets behind.
pub const DEFAULT_POOL_MAX_IDLE_PER_HOST: usize = 32;

/// How long an idle pooled connection is kept before it is closed.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Largest response body read from the provider. A provider answer is a few
/// hundred bytes; the cap keeps a misbehaving provider from exhausting memory.
pub const MAX_RESPONSE_BODY: usize = 64 * 1024;

/// How much of an error body is quoted in a failure reason (it ends up in logs
/// and in the transfer's `failure_reason`).
const REASON_BODY_EXCERPT: usize = 200;

/// Why an [`HttpProvider`] could not be built.
#[derive(Debug, thiserror::Error)]
pub enum HttpProviderError {
    /// The base URL is not an absolute `http://` or `https://` URL.
    #[error("invalid provider url {url:?}: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The HTTP client could not be constructed.
    #[error("cannot build http client: {0}")]
    Client(#[from] reqwest::Error),
}

/// A [`Provider`] reached over HTTP. Cheap to share: one pooled client is built
/// in [`HttpProvider::new`] and reused by every call.
#[derive(Debug, Clone)]
pub struct HttpProvider {
    client: reqwest::Client,
    payouts_url: reqwest::Url,
}

impl HttpProvider {
    /// Builds a provider for `base_url` (e.g. `http://127.0.0.1:9090`). `timeout`
    /// bounds each whole call — connect, send, and reading the answer — so a
    /// stuck provider turns into a retryable [`ProviderError::Transient`].
    pub fn new(base_url: &str, timeout: Duration) -> Result<Self, HttpProviderError> {
        Self::with_pool(base_url, timeout, DEFAULT_POOL_MAX_IDLE_PER_HOST)
    }

    /// Like [`HttpProvider::new`] with an explicit bound on idle pooled
    /// connections per host.
    pub fn with_pool(
        base_url: &str,
        timeout: Duration,
        max_idle_per_host: usize,
    ) -> Result<Self, HttpProviderError> {
        let payouts_url = payouts_url(base_url)?;
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .pool_max_idle_per_host(max_idle_per_host)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            // A redirected POST could be replayed against another host or turned
            // into a GET; a payout must go exactly where it was configured to.
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Self {
            client,
            payouts_url,
        })
    }

    /// Opens up to `connections` keep-alive connections to the provider and
    /// leaves them in the pool; returns how many calls were answered.
    ///
    /// Why: the pool opens a connection for each call that finds none idle,
    /// so a fresh process whose first burst has a hundred calls in flight
    /// makes a hundred handshakes while those payouts wait, and the calls
    /// that queue behind them make the burst longer. Each connection is
    /// opened by a status lookup of the nil id, which no transfer has: a
    /// read the provider protocol already has, which changes nothing there
    /// (the answer is `404 payout_not_found`; any other answer is logged, as
    /// a sign that the URL is not the provider's). Failures are only
    /// counted: a provider that is down now is called when it is back.
    pub async fn warm(&self, connections: usize) -> usize {
        let url = self.lookup_url(Uuid::nil());
        let calls = (0..connections).map(|_| {
            let request = self.client.get(url.clone());
            async move {
                let mut response = request.send().await.ok()?;
                let status = response.status().as_u16();
                // Read to its end, so the connection goes back to the pool.
                let body = read_capped(&mut response).await;
                let lookup = classify_lookup(status, body.as_deref().map_err(String::as_str));
                Some(matches!(lookup, Ok(None)))
            }
        });
        let answers = futures::future::join_all(calls).await;
        let answered = answers.iter().flatten().count();
        let unexpected = answers
            .iter()
            .flatten()
            .filter(|not_found| !**not_found)
            .count();
        if unexpected > 0 {
            // Said at startup, not at the first payout.
            tracing::warn!(
                unexpected,
                %url,
                "a lookup of an id no payout has was not answered payout_not_found: is --provider-url the provider's?"
            );
        }
        answered
    }

    /// `{base_url}/payouts/{id}`.
    fn lookup_url(&self, transfer_id: Uuid) -> reqwest::Url {
        reqwest::Url::parse(&format!("{}/{transfer_id}", self.payouts_url))
            .expect("a payouts URL with a UUID appended is a URL")
    }

    /// The URL payouts are posted to (`{base_url}/payouts`).
    pub fn payouts_url(&self) -> &str {
        self.payouts_url.as_str()
    }

    async fn call(
        client: reqwest::Client,
        url: reqwest::Url,
        payout: Payout,
    ) -> Result<ProviderOutcome, ProviderError> {
        let body = PayoutRequestBody::from(&payout);
        let sent = client
            .post(url)
            .header("Idempotency-Key", payout.transfer_id.to_string())
            .json(&body)
            .send()
            .await;
        let mut response = match sent {
            Ok(response) => response,
            Err(err) => return classify(no_response(&err)),
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, SystemTime::now()));
        let body = read_capped(&mut response).await;
        classify(Exchange::Response {
            status,
            retry_after,
            body: body.as_deref().map_err(String::as_str),
        })
    }

    async fn look_up(
        client: reqwest::Client,
        url: reqwest::Url,
    ) -> Result<Option<ProviderOutcome>, ProviderError> {
        let mut response = match client.get(url).send().await {
            Ok(response) => response,
            Err(err) => return Err(transient_of(classify(no_response(&err)))),
        };
        let status = response.status().as_u16();
        let body = read_capped(&mut response).await;
        classify_lookup(status, body.as_deref().map_err(String::as_str))
    }
}

/// What a `GET /payouts/{id}` answer says. Only a `200` whose body states a
/// final outcome, or a `404` whose body is the provider's own
/// `{"error": "payout_not_found"}` (never executed), decides anything. Any
/// other `404` (a gateway's page, an unknown route) and everything else
/// leaves the payout's fate unknown, so the caller retries later and parks
/// the row when its budget ends.
pub fn classify_lookup(
    status: u16,
    body: Result<&[u8], &str>,
) -> Result<Option<ProviderOutcome>, ProviderError> {
    let unknown = |reason: String| ProviderError::Transient {
        reason,
        retry_after: None,
        ambiguous: true,
    };
    match status {
        200 => {
            let body = body.map_err(|e| unknown(format!("lookup: HTTP 200, {e}")))?;
            match serde_json::from_slice::<AnswerBody>(body) {
                Ok(answer) => Ok(Some(answer.outcome())),
                Err(e) => Err(unknown(format!(
                    "lookup: HTTP 200 with unusable body ({e}): {}",
                    excerpt(body)
                ))),
            }
        }
        404 if provider_error_slug(body) == Some(PAYOUT_NOT_FOUND) => Ok(None),
        _ => Err(unknown(format!(
            "lookup: HTTP {status}{}",
            body_suffix(body)
        ))),
    }
}

/// A transport failure as an [`Exchange`]: a connection that was never made
/// carried no request, anything later may have.
fn no_response(err: &reqwest::Error) -> Exchange<'static> {
    Exchange::NoResponse {
        reason: describe_transport_error(err),
        maybe_sent: !err.is_connect(),
    }
}

/// The error of a classified transport failure (which is never a success).
fn transient_of(r: Result<ProviderOutcome, ProviderError>) -> ProviderError {
    match r {
        Err(e) => e,
        Ok(_) => unreachable!("a transport failure is never an outcome"),
    }
}

impl Provider for HttpProvider {
    fn execute(
        &self,
        payout: Payout,
    ) -> BoxFuture<'static, Result<ProviderOutcome, ProviderError>> {
        // reqwest::Client is an Arc inside; cloning it shares the pool.
        Self::call(self.client.clone(), self.payouts_url.clone(), payout).boxed()
    }

    fn lookup(
        &self,
        transfer_id: Uuid,
    ) -> BoxFuture<'static, Result<Option<ProviderOutcome>, ProviderError>> {
        Self::look_up(self.client.clone(), self.lookup_url(transfer_id)).boxed()
    }
}

fn payouts_url(base_url: &str) -> Result<reqwest::Url, HttpProviderError> {
    let invalid = |reason: String| HttpProviderError::InvalidUrl {
        url: base_url.to_owned(),
        reason,
    };
    let base = reqwest::Url::parse(base_url).map_err(|e| invalid(e.to_string()))?;
    if !matches!(base.scheme(), "http" | "https") {
        return Err(invalid("scheme must be http or https".into()));
    }
    if base.cannot_be_a_base() || base.query().is_some() || base.fragment().is_some() {
        return Err(invalid(
            "must be a plain base url without query or fragment".into(),
        ));
    }
    // Join by hand: Url::join would drop a base path without a trailing slash
    // (`http://h/api` + `payouts` = `http://h/payouts`).
    let joined = format!("{}/payouts", base.as_str().trim_end_matches('/'));
    reqwest::Url::parse(&joined).map_err(|e| invalid(e.to_string()))
}

/// Reads `response`'s body into `head` until `max` bytes are in hand or the
/// body ends, and keeps at most `max` bytes: whoever answers cannot make
/// this process read, wait for or hold more. What follows is left unread
/// and dropped with the connection. On an error `head` keeps what arrived.
pub(crate) async fn read_head(
    response: &mut reqwest::Response,
    max: usize,
    head: &mut Vec<u8>,
) -> Result<(), reqwest::Error> {
    while head.len() < max {
        let Some(chunk) = response.chunk().await? else {
            break;
        };
        let room = max - head.len();
        head.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }
    assert!(head.len() <= max);
    Ok(())
}

/// Reads at most [`MAX_RESPONSE_BODY`] bytes; a longer body is an error rather
/// than silently truncated JSON.
async fn read_capped(response: &mut reqwest::Response) -> Result<Vec<u8>, String> {
    // One byte past the cap tells a body over it from one that fits exactly.
    let mut body = Vec::new();
    read_head(response, MAX_RESPONSE_BODY + 1, &mut body)
        .await
        .map_err(|err| format!("reading body: {}", describe_transport_error(&err)))?;
    if body.len() > MAX_RESPONSE_BODY {
        return Err(format!("response body over {MAX_RESPONSE_BODY} bytes"));
    }
    Ok(body)
}

/// reqwest's own message is only the outermost layer ("error sending request");
/// the cause that matters for an operator (refused, reset, timed out) is deeper.
pub(crate) fn describe_transport_error(err: &reqwest::Error) -> String {
    let kind = if err.is_timeout() {
        "timeout"
    } else if err.is_connect() {
        "connection error"
    } else {
        "transport error"
    };
    let mut text = format!("{kind}: {err}");
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The JSON body of `POST /payouts` (docs/ARCHITECTURE.md).
#[derive(Debug, Serialize)]
struct PayoutRequestBody<'a> {
    transfer_id: Uuid,
    account_owner: Uuid,
    amount: i64,
    currency: &'a str,
    source_account: &'a str,
    destination_account: &'a str,
}

impl<'a> From<&'a Payout> for PayoutRequestBody<'a> {
    fn from(p: &'a Payout) -> Self {
        Self {
            transfer_id: p.transfer_id,
            account_owner: p.account_owner,
            amount: p.amount,
            currency: &p.currency,
            source_account: &p.source_account,
            destination_account: &p.destination_account,
        }
    }
}

/// The part of a `2xx` answer that decides the outcome. Other fields (the sim
/// also echoes `transfer_id`) are ignored so a provider may add fields freely.
#[derive(Debug, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
enum AnswerBody {
    Succeeded {
        reference: String,
    },
    Declined {
        reason: Option<String>,
    },
    Processing {
        reference: Option<String>,
    },
    Returned {
        reference: Option<String>,
        reason: Option<String>,
    },
}

impl AnswerBody {
    fn outcome(self) -> ProviderOutcome {
        match self {
            Self::Succeeded { reference } => ProviderOutcome::Succeeded { reference },
            Self::Declined { reason } => ProviderOutcome::Declined {
                reason: reason.unwrap_or_else(|| "declined".to_owned()),
            },
            Self::Processing { reference } => ProviderOutcome::Processing { reference },
            Self::Returned { reference, reason } => ProviderOutcome::Returned {
                reference,
                reason: reason.unwrap_or_else(|| "returned".to_owned()),
            },
        }
    }
}

/// What one HTTP exchange produced, reduced to what [`classify`] needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exchange<'a> {
    /// No response head arrived: connection refused or reset, timeout, or the
    /// peer closed the connection before answering.
    NoResponse {
        /// The transport's description of what went wrong.
        reason: String,
        /// False only when no connection was made, so no request went out.
        maybe_sent: bool,
    },
    /// A response head arrived.
    Response {
        /// The HTTP status code.
        status: u16,
        /// The parsed `Retry-After`, if the provider sent a valid one.
        retry_after: Option<Duration>,
        /// The body, or why it could not be read completely.
        body: Result<&'a [u8], &'a str>,
    },
}

/// Maps one exchange to the engine's view of it (docs/ARCHITECTURE.md).
///
/// The rule of thumb behind every row: a payout may only be called final
/// (succeeded, declined, permanent) when the provider said so unambiguously.
/// Whenever it might have executed without us knowing the answer, the result is
/// [`ProviderError::Transient`], because a retry under the same business id is
/// always safe against an idempotent provider, while a wrong "failed" is not.
pub fn classify(exchange: Exchange<'_>) -> Result<ProviderOutcome, ProviderError> {
    let (status, retry_after, body) = match exchange {
        Exchange::NoResponse { reason, maybe_sent } => {
            return Err(ProviderError::Transient {
                reason,
                retry_after: None,
                ambiguous: maybe_sent,
            })
        }
        Exchange::Response {
            status,
            retry_after,
            body,
        } => (status, retry_after, body),
    };
    // Only these statuses say the provider did not act on the request.
    let ambiguous = !matches!(status, 408 | 425 | 429);
    let transient = |reason: String| ProviderError::Transient {
        reason,
        retry_after,
        ambiguous,
    };
    match status {
        200..=299 => {
            // A 2xx whose body we could not read or understand may well be a
            // success we failed to see: retry and let idempotency replay it.
            let body = body.map_err(|e| transient(format!("HTTP {status}, {e}")))?;
            match serde_json::from_slice::<AnswerBody>(body) {
                Ok(answer) => Ok(answer.outcome()),
                Err(e) => Err(transient(format!(
                    "HTTP {status} with unusable body ({e}): {}",
                    excerpt(body)
                ))),
            }
        }
        408 | 409 | 425 | 429 | 500..=599 => {
            Err(transient(format!("HTTP {status}{}", body_suffix(body))))
        }
        // Not about this payout: the engine is talking to the wrong place
        // or with the wrong credentials. Nothing is final on such a say-so.
        401 | 403 | 404 | 405 => Err(ProviderError::Misconfigured {
            reason: format!("HTTP {status}{}", body_suffix(body)),
        }),
        400..=499 if provider_error_slug(body).is_some() => Err(ProviderError::Permanent {
            reason: format!("HTTP {status}{}", body_suffix(body)),
        }),
        400..=499 => Err(ProviderError::Misconfigured {
            reason: format!(
                "HTTP {status} without the provider's JSON error{}",
                body_suffix(body)
            ),
        }),
        // 1xx/3xx are not part of the contract (redirects are not followed). We
        // cannot tell whether anything executed, so keep the row retryable; it
        // dead-letters after the attempt limit where an operator sees it.
        _ => Err(transient(format!(
            "unexpected HTTP {status}{}",
            body_suffix(body)
        ))),
    }
}

/// The slug a lookup answers for an id the provider never executed.
pub const PAYOUT_NOT_FOUND: &str = "payout_not_found";

/// The provider's own error body: a JSON object whose `error` is a string.
#[derive(Deserialize)]
struct ProviderErrorBody<'a> {
    #[serde(borrow)]
    error: std::borrow::Cow<'a, str>,
}

/// The `error` slug of a provider's JSON error body; `None` for anything
/// else (an HTML page, an empty body, other JSON).
fn provider_error_slug(body: Result<&[u8], &str>) -> Option<&'static str> {
    let parsed: ProviderErrorBody = serde_json::from_slice(body.ok()?).ok()?;
    // Interned to the slugs that decide something; any other one only says
    // "the provider's own JSON".
    Some(match parsed.error.as_ref() {
        PAYOUT_NOT_FOUND => PAYOUT_NOT_FOUND,
        _ => "other",
    })
}

fn body_suffix(body: Result<&[u8], &str>) -> String {
    match body {
        Ok([]) => String::new(),
        Ok(bytes) => format!(": {}", excerpt(bytes)),
        Err(e) => format!(" ({e})"),
    }
}

fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut out: String = text.chars().take(REASON_BODY_EXCERPT).collect();
    if text.chars().count() > REASON_BODY_EXCERPT {
        out.push('…');
    }
    out
}

/// Parses a `Retry-After` value: delta-seconds (`120`) or an HTTP-date
/// (`Wed, 21 Oct 2015 07:28:00 GMT`, taken relative to `now`; a date in the past
/// means "now", i.e. zero). Anything else is ignored (`None`) rather than
/// guessed at, and the relay falls back to its own backoff.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Saturate absurdly long values instead of rejecting them; the relay caps
        // its delay anyway.
        return Some(Duration::from_secs(value.parse().unwrap_or(u64::MAX)));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(body: impl Into<reqwest::Body>) -> reqwest::Response {
        reqwest::Response::from(http::Response::new(body.into()))
    }

    async fn head(body: &'static str, max: usize) -> Vec<u8> {
        let mut head = Vec::new();
        read_head(&mut answer(body), max, &mut head).await.unwrap();
        head
    }

    #[tokio::test]
    async fn a_body_head_is_never_longer_than_asked() {
        assert_eq!(head("hello", 4).await, b"hell");
        assert_eq!(head("hello", 5).await, b"hello");
        assert_eq!(head("hello", 9).await, b"hello");
        assert_eq!(head("", 0).await, b"");
    }

    #[tokio::test]
    async fn a_capped_body_refuses_one_byte_more_than_the_cap() {
        let fits = vec![b'x'; MAX_RESPONSE_BODY];
        assert_eq!(read_capped(&mut answer(fits.clone())).await, Ok(fits));
        let over = vec![b'x'; MAX_RESPONSE_BODY + 1];
        let err = read_capped(&mut answer(over)).await.unwrap_err();
        assert!(err.contains("over"), "{err}");
    }

    fn resp(status: u16, body: &str) -> Result<ProviderOutcome, ProviderError> {
        classify(Exchange::Response {
            status,
            retry_after: None,
            body: Ok(body.as_bytes()),
        })
    }

    fn is_transient(r: &Result<ProviderOutcome, ProviderError>) -> bool {
        matches!(r, Err(ProviderError::Transient { .. }))
    }

    fn is_permanent(r: &Result<ProviderOutcome, ProviderError>) -> bool {
        matches!(r, Err(ProviderError::Permanent { .. }))
    }

    #[test]
    fn success_2xx_gives_reference() {
        for status in [200, 201] {
            assert_eq!(
                resp(
                    status,
                    r#"{"status":"succeeded","reference":"sim_1","transfer_id":"x"}"#
                ),
                Ok(ProviderOutcome::Succeeded {
                    reference: "sim_1".into()
                })
            );
        }
    }

    #[test]
    fn declined_2xx_gives_reason() {
        assert_eq!(
            resp(
                200,
                r#"{"status":"declined","reason":"insufficient_funds"}"#
            ),
            Ok(ProviderOutcome::Declined {
                reason: "insufficient_funds".into()
            })
        );
        // A decline is final even when the provider forgets to say why.
        assert_eq!(
            resp(200, r#"{"status":"declined"}"#),
            Ok(ProviderOutcome::Declined {
                reason: "declined".into()
            })
        );
    }

    #[test]
    fn unusable_2xx_body_is_transient() {
        for body in [
            "",
            "not json",
            r#"{"status":"pending"}"#,
            r#"{"reference":"sim_1"}"#,
            r#"{"status":"succeeded"}"#,
            r#"{"status":"succeeded","reference":7}"#,
        ] {
            assert!(is_transient(&resp(200, body)), "{body:?}");
        }
    }

    #[test]
    fn body_read_error_on_2xx_is_transient() {
        let r = classify(Exchange::Response {
            status: 200,
            retry_after: None,
            body: Err("reading body: connection reset"),
        });
        assert!(is_transient(&r));
    }

    #[test]
    fn transient_statuses() {
        for status in [408, 409, 425, 429, 500, 502, 503, 504, 507, 599] {
            assert!(is_transient(&resp(status, "{}")), "{status}");
        }
    }

    fn is_misconfigured(r: &Result<ProviderOutcome, ProviderError>) -> bool {
        matches!(r, Err(ProviderError::Misconfigured { .. }))
    }

    #[test]
    fn other_4xx_with_the_providers_error_are_permanent_and_quote_the_body() {
        let own = r#"{"error":"invalid_account","message":"no"}"#;
        for status in [400, 410, 413, 415, 422, 499] {
            assert!(is_permanent(&resp(status, own)), "{status}");
        }
        match resp(422, r#"{"error":"idempotency_key_reused"}"#) {
            Err(ProviderError::Permanent { reason }) => {
                assert!(reason.contains("422") && reason.contains("idempotency_key_reused"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn answers_that_are_not_the_provider_speaking_are_misconfiguration() {
        // Whatever the body: these say "wrong place or wrong credentials".
        for status in [401, 403, 404, 405] {
            for body in ["", "<html>Not Found</html>", r#"{"error":"forbidden"}"#] {
                assert!(is_misconfigured(&resp(status, body)), "{status} {body}");
            }
        }
        // Another 4xx without the provider's JSON error: a gateway's page.
        for body in ["", "<html>Bad Request</html>", "{}", r#"{"error":1}"#, "[]"] {
            assert!(is_misconfigured(&resp(400, body)), "{body}");
            assert!(is_misconfigured(&resp(422, body)), "{body}");
        }
    }

    #[test]
    fn unexpected_1xx_3xx_are_transient() {
        for status in [100, 301, 302, 304] {
            assert!(is_transient(&resp(status, "")), "{status}");
        }
    }

    #[test]
    fn no_response_is_transient_without_retry_after() {
        assert_eq!(
            classify(Exchange::NoResponse {
                reason: "timeout".into(),
                maybe_sent: true,
            }),
            Err(ProviderError::Transient {
                reason: "timeout".into(),
                retry_after: None,
                ambiguous: true,
            })
        );
        assert!(matches!(
            classify(Exchange::NoResponse {
                reason: "connection refused".into(),
                maybe_sent: false,
            }),
            Err(ProviderError::Transient {
                ambiguous: false,
                ..
            })
        ));
    }

    #[test]
    fn only_statuses_that_prove_nothing_ran_are_unambiguous() {
        for (status, ambiguous) in [
            (408, false),
            (425, false),
            (429, false),
            (409, true),
            (500, true),
            (503, true),
        ] {
            match resp(status, "") {
                Err(ProviderError::Transient { ambiguous: a, .. }) => {
                    assert_eq!(a, ambiguous, "{status}")
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn lookup_decides_only_on_a_final_200_or_the_providers_own_404() {
        assert_eq!(
            classify_lookup(
                200,
                Ok(br#"{"status":"succeeded","reference":"sim_9","transfer_id":"x"}"#)
            ),
            Ok(Some(ProviderOutcome::Succeeded {
                reference: "sim_9".into()
            }))
        );
        assert_eq!(
            classify_lookup(200, Ok(br#"{"status":"declined","reason":"no"}"#)),
            Ok(Some(ProviderOutcome::Declined {
                reason: "no".into()
            }))
        );
        assert_eq!(
            classify_lookup(404, Ok(br#"{"error":"payout_not_found","message":"no"}"#)),
            Ok(None)
        );
        for (status, body) in [
            (200, &b"{}"[..]),
            (500, b""),
            (403, b""),
            (429, b""),
            // A 404 that is not the provider's "no such payout": a gateway's
            // page, an unknown route, anything else.
            (404, b""),
            (404, b"<html>404 Not Found</html>"),
            (404, br#"{"error":"route_not_found"}"#),
            (404, br#"{"error":"not_found"}"#),
            (401, br#"{"error":"payout_not_found"}"#),
        ] {
            assert!(
                matches!(
                    classify_lookup(status, Ok(body)),
                    Err(ProviderError::Transient {
                        ambiguous: true,
                        ..
                    })
                ),
                "{status}"
            );
        }
    }

    #[test]
    fn retry_after_is_carried_on_transient_only() {
        let with = |status| {
            classify(Exchange::Response {
                status,
                retry_after: Some(Duration::from_secs(3)),
                body: Ok(b""),
            })
        };
        match with(503) {
            Err(ProviderError::Transient { retry_after, .. }) => {
                assert_eq!(retry_after, Some(Duration::from_secs(3)))
            }
            other => panic!("{other:?}"),
        }
        match with(429) {
            Err(ProviderError::Transient { retry_after, .. }) => {
                assert_eq!(retry_after, Some(Duration::from_secs(3)))
            }
            other => panic!("{other:?}"),
        }
        assert!(is_misconfigured(&with(400)));
    }

    #[test]
    fn long_error_bodies_are_excerpted() {
        let body = format!(r#"{{"error":"bad","message":"{}"}}"#, "x".repeat(10_000));
        match resp(400, &body) {
            Err(ProviderError::Permanent { reason }) => assert!(reason.len() < 300),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn retry_after_delta_seconds() {
        let now = SystemTime::now();
        assert_eq!(parse_retry_after("1", now), Some(Duration::from_secs(1)));
        assert_eq!(
            parse_retry_after(" 120 ", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(parse_retry_after("0", now), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("99999999999999999999999", now),
            Some(Duration::from_secs(u64::MAX))
        );
    }

    #[test]
    fn retry_after_http_date() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        // Already past: retry now.
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:27:00 GMT", now),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn retry_after_garbage_is_ignored() {
        let now = SystemTime::now();
        for v in ["", "-1", "1.5", "soon", "1s"] {
            assert_eq!(parse_retry_after(v, now), None, "{v:?}");
        }
    }

    #[test]
    fn payouts_url_joins_paths() {
        let d = Duration::from_secs(1);
        let p = |u| HttpProvider::new(u, d).map(|p| p.payouts_url().to_owned());
        assert_eq!(
            p("http://127.0.0.1:9090").unwrap(),
            "http://127.0.0.1:9090/payouts"
        );
        assert_eq!(
            p("http://127.0.0.1:9090/").unwrap(),
            "http://127.0.0.1:9090/payouts"
        );
        assert_eq!(p("http://h/api").unwrap(), "http://h/api/payouts");
        assert_eq!(p("http://h/api/").unwrap(), "http://h/api/payouts");
        assert!(p("ftp://h").is_err());
        assert!(p("127.0.0.1:9090").is_err());
        assert!(p("http://h/?x=1").is_err());
    }

    #[test]
    fn request_body_has_the_spec_fields() {
        let payout = Payout {
            transfer_id: Uuid::nil(),
            account_owner: Uuid::from_u128(7),
            amount: 1500,
            currency: "JPY".into(),
            source_account: "acc_a".into(),
            destination_account: "acc_b".into(),
        };
        let v = serde_json::to_value(PayoutRequestBody::from(&payout)).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "transfer_id": "00000000-0000-0000-0000-000000000000",
                "account_owner": "00000000-0000-0000-0000-000000000007",
                "amount": 1500,
                "currency": "JPY",
                "source_account": "acc_a",
                "destination_account": "acc_b",
            })
        );
    }
}
