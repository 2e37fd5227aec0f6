//! The HTTP side: payrail's `/transfers` and provider-sim's `/stats` and
//! `/payouts/{id}`, read the way docs/API.md and provider-sim describe them (the wire
//! types are the load test's own, so a server drifting from the contract is
//! noticed rather than agreed with).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use bytes::Bytes;
use reqwest::header::{HeaderMap, LOCATION, RETRY_AFTER};
use reqwest::{StatusCode, Url};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// One HTTP answer to `POST /transfers`, whatever its status.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// `Idempotent-Replayed: true` was present.
    pub replayed: bool,
    /// The `Location` header.
    pub location: Option<String>,
    /// `Retry-After`, as a wait from now.
    pub retry_after: Option<Duration>,
    /// The raw body, kept to check that replays are byte-identical.
    pub body: Bytes,
}

impl Answer {
    /// The `type` of an RFC 9457 problem body, if the body is one.
    pub fn problem_type(&self) -> Option<String> {
        let v: serde_json::Value = serde_json::from_slice(&self.body).ok()?;
        v.get("type")?.as_str().map(str::to_owned)
    }
}

/// An attempt that got no HTTP answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The client's timeout ran out (connecting, sending or reading).
    Timeout,
    /// Anything else: refused or reset connection, a body cut short.
    Error(String),
}

/// The body of `POST /transfers` this load test sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TransferBody {
    /// Minor units.
    pub amount: i64,
    /// ISO 4217 code.
    pub currency: String,
    /// Account debited.
    pub source_account: String,
    /// Account credited.
    pub destination_account: String,
    /// Free text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Client data.
    pub metadata: BTreeMap<String, String>,
}

impl TransferBody {
    /// Where `t` differs from this body (empty when it matches).
    pub fn mismatches(&self, t: &Transfer) -> Vec<String> {
        let mut out = Vec::new();
        let mut check = |field: &str, sent: String, got: String| {
            if sent != got {
                out.push(format!("{field}: sent {sent}, got {got}"));
            }
        };
        check("amount", self.amount.to_string(), t.amount.to_string());
        check("currency", self.currency.clone(), t.currency.clone());
        check(
            "source_account",
            self.source_account.clone(),
            t.source_account.clone(),
        );
        check(
            "destination_account",
            self.destination_account.clone(),
            t.destination_account.clone(),
        );
        check(
            "description",
            format!("{:?}", self.description),
            format!("{:?}", t.description),
        );
        check(
            "metadata",
            format!("{:?}", self.metadata),
            format!("{:?}", t.metadata),
        );
        out
    }
}

/// A transfer as payrail represents it (docs/API.md); unknown fields are ignored.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Transfer {
    /// Transfer id.
    pub id: Uuid,
    /// `pending`, `processing`, `succeeded`, `failed` or `returned`.
    pub status: String,
    /// Minor units.
    pub amount: i64,
    /// ISO 4217 code.
    pub currency: String,
    /// Account debited.
    pub source_account: String,
    /// Account credited.
    pub destination_account: String,
    /// Free text or null.
    pub description: Option<String>,
    /// Client data.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// The key it was created under.
    pub idempotency_key: String,
    /// RFC 3339, UTC.
    pub created_at: String,
    /// The provider's reference once succeeded.
    pub provider_reference: Option<String>,
    /// Why it failed.
    pub failure_reason: Option<String>,
    /// Why it came back, once `returned`.
    #[serde(default)]
    pub return_reason: Option<String>,
}

impl Transfer {
    /// True once the provider decided it (not `pending`, not `processing`).
    pub fn is_decided(&self) -> bool {
        !matches!(self.status.as_str(), "pending" | "processing")
    }
}

/// One page of `GET /transfers`.
#[derive(Debug, Clone, Deserialize)]
pub struct Page {
    /// Newest first.
    pub data: Vec<Transfer>,
    /// Older transfers follow.
    pub has_more: bool,
}

/// payrail's HTTP API as one client (tenant) sees it.
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    transfers: Url,
    bearer: String,
}

/// A pooled client that cannot be steered off loopback: no proxy from the
/// environment (it would carry the load elsewhere) and no redirects.
pub fn http_client(pool: usize) -> anyhow::Result<reqwest::Client> {
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(pool)
        .tcp_nodelay(true)
        .build()
        .context("building the HTTP client")
}

impl Api {
    /// `target` must already have passed the loopback check.
    pub fn new(http: reqwest::Client, target: &Url, api_key: &str) -> anyhow::Result<Self> {
        // A base path without its trailing slash would lose its last segment in `join`.
        let mut base = target.clone();
        if !base.path().ends_with('/') {
            base.set_path(&format!("{}/", base.path()));
        }
        Ok(Self {
            http,
            transfers: base.join("transfers").context("target URL")?,
            bearer: format!("Bearer {api_key}"),
        })
    }

    /// One attempt of `POST /transfers`, bounded by `timeout` from start to
    /// the last byte of the body.
    pub async fn post_transfer(
        &self,
        key: &str,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Answer, Failure> {
        let res = self
            .http
            .post(self.transfers.clone())
            .header("Authorization", &self.bearer)
            .header("Content-Type", "application/json")
            .header("Idempotency-Key", key)
            .timeout(timeout)
            .body(body)
            .send()
            .await
            .map_err(failure)?;
        // Read what is needed from the headers before `bytes` consumes them.
        let headers = res.headers();
        let status = res.status().as_u16();
        let replayed = header_str(headers, "idempotent-replayed")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"));
        let location = header_str(headers, LOCATION.as_str()).map(str::to_owned);
        let retry_after = header_str(headers, RETRY_AFTER.as_str())
            .and_then(|v| parse_retry_after(v, SystemTime::now()));
        let body = res.bytes().await.map_err(failure)?;
        Ok(Answer {
            status,
            replayed,
            location,
            retry_after,
            body,
        })
    }

    /// `GET /transfers/{id}`: `Ok(None)` on 404.
    pub async fn get_transfer(
        &self,
        id: Uuid,
        timeout: Duration,
    ) -> Result<Option<Transfer>, String> {
        let url = self
            .transfers
            .join(&format!("transfers/{id}"))
            .map_err(|e| e.to_string())?;
        let res = self.get(url, timeout).await?;
        match res.status() {
            StatusCode::NOT_FOUND => Ok(None),
            StatusCode::OK => res
                .json()
                .await
                .map(Some)
                .map_err(|e| format!("GET /transfers/{id}: {e}")),
            s => Err(format!("GET /transfers/{id} answered {s}")),
        }
    }

    /// `GET /transfers?limit=100&starting_after=…`.
    pub async fn list_page(
        &self,
        starting_after: Option<Uuid>,
        timeout: Duration,
    ) -> Result<Page, String> {
        let mut url = self.transfers.clone();
        {
            let mut q = url.query_pairs_mut();
            q.append_pair("limit", "100");
            if let Some(id) = starting_after {
                q.append_pair("starting_after", &id.to_string());
            }
        }
        let res = self.get(url, timeout).await?;
        match res.status() {
            StatusCode::OK => res.json().await.map_err(|e| format!("GET /transfers: {e}")),
            s => Err(format!("GET /transfers answered {s}")),
        }
    }

    /// A read, waiting out `429 rate-limited` as told: the audit reads as fast
    /// as it can and shares the client's rate limit with nobody else, so
    /// being throttled is expected, not a failure.
    async fn get(&self, url: Url, timeout: Duration) -> Result<reqwest::Response, String> {
        for _ in 0..READ_THROTTLED_ATTEMPTS {
            let res = self
                .http
                .get(url.clone())
                .header("Authorization", &self.bearer)
                .timeout(timeout)
                .send()
                .await
                .map_err(|e| error_chain(&e))?;
            if res.status() != StatusCode::TOO_MANY_REQUESTS {
                return Ok(res);
            }
            let wait = header_str(res.headers(), RETRY_AFTER.as_str())
                .and_then(|v| parse_retry_after(v, SystemTime::now()))
                .unwrap_or(Duration::from_secs(1))
                .min(READ_THROTTLED_WAIT_MAX);
            tokio::time::sleep(wait).await;
        }
        Err(format!(
            "GET {} still rate-limited after {READ_THROTTLED_ATTEMPTS} attempts",
            url.path()
        ))
    }
}

/// Reads answered `429` are repeated this often before giving up.
const READ_THROTTLED_ATTEMPTS: u32 = 20;
/// Longest wait honoured between throttled reads.
const READ_THROTTLED_WAIT_MAX: Duration = Duration::from_secs(2);

/// provider-sim's `GET /stats` (the README's provider-sim section); extra counters are ignored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SimStats {
    /// Every `POST /payouts` received.
    pub requests: u64,
    /// Payouts decided for the first time (succeeded or declined).
    pub executions: u64,
    /// Repeats answered from the store.
    pub replays: u64,
    /// Distinct business ids stored.
    pub distinct_ids: u64,
    /// Decisions, returns and notifications still to come (its
    /// asynchronous mode).
    #[serde(default)]
    pub later_pending: u64,
}

/// provider-sim's `GET /payouts/{id}`, the fields this load test compares.
#[derive(Debug, Clone, Deserialize)]
pub struct PayoutRecord {
    /// The business id (payrail's transfer id).
    pub transfer_id: Uuid,
    /// Minor units.
    pub amount: i64,
    /// ISO 4217 code.
    pub currency: String,
    /// Account debited.
    pub source_account: String,
    /// Account credited.
    pub destination_account: String,
    /// Where the payout is now: `processing`, `succeeded`, `declined` or
    /// `returned`.
    pub status: String,
    /// Set once accepted or executed.
    pub reference: Option<String>,
}

/// provider-sim, read only.
#[derive(Clone)]
pub struct Sim {
    http: reqwest::Client,
    base: Url,
}

impl Sim {
    /// `base` must already have passed the loopback check.
    pub fn new(http: reqwest::Client, mut base: Url) -> Self {
        if !base.path().ends_with('/') {
            base.set_path(&format!("{}/", base.path()));
        }
        Self { http, base }
    }

    /// `GET /stats`.
    pub async fn stats(&self, timeout: Duration) -> Result<SimStats, String> {
        let url = self.base.join("stats").map_err(|e| e.to_string())?;
        let res = self
            .http
            .get(url)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| format!("provider-sim GET /stats: {}", error_chain(&e)))?;
        if res.status() != StatusCode::OK {
            return Err(format!("provider-sim GET /stats answered {}", res.status()));
        }
        res.json()
            .await
            .map_err(|e| format!("provider-sim GET /stats: {e}"))
    }

    /// `GET /payouts/{id}`: `Ok(None)` when the sim never executed it.
    pub async fn payout(
        &self,
        id: Uuid,
        timeout: Duration,
    ) -> Result<Option<PayoutRecord>, String> {
        let url = self
            .base
            .join(&format!("payouts/{id}"))
            .map_err(|e| e.to_string())?;
        let res = self
            .http
            .get(url)
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| format!("provider-sim GET /payouts/{id}: {}", error_chain(&e)))?;
        match res.status() {
            StatusCode::NOT_FOUND => Ok(None),
            StatusCode::OK => res
                .json()
                .await
                .map(Some)
                .map_err(|e| format!("provider-sim GET /payouts/{id}: {e}")),
            s => Err(format!("provider-sim GET /payouts/{id} answered {s}")),
        }
    }
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn failure(e: reqwest::Error) -> Failure {
    if e.is_timeout() {
        Failure::Timeout
    } else {
        Failure::Error(error_chain(&e))
    }
}

/// reqwest's top-level message hides the cause ("error sending request");
/// the chain says whether it was a refusal, a reset or a closed connection.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut msg = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    msg
}

/// `Retry-After` as delay-seconds or an HTTP-date, as a wait from `now`.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_takes_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        assert_eq!(parse_retry_after(" 3 ", now), Some(Duration::from_secs(3)));
        let later = httpdate::fmt_http_date(now + Duration::from_secs(7));
        assert_eq!(parse_retry_after(&later, now), Some(Duration::from_secs(7)));
        let earlier = httpdate::fmt_http_date(now - Duration::from_secs(7));
        assert_eq!(parse_retry_after(&earlier, now), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-1", now), None);
    }

    #[test]
    fn body_mismatches_name_every_differing_field() {
        let body = TransferBody {
            amount: 5,
            currency: "USD".into(),
            source_account: "a".into(),
            destination_account: "b".into(),
            description: None,
            metadata: BTreeMap::new(),
        };
        let t: Transfer = serde_json::from_value(serde_json::json!({
            "id": Uuid::nil(), "status": "pending", "amount": 6, "currency": "USD",
            "source_account": "a", "destination_account": "b", "description": null,
            "metadata": {}, "idempotency_key": "k", "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z", "provider_reference": null,
            "failure_reason": null, "extra": 1
        }))
        .unwrap();
        assert_eq!(body.mismatches(&t), ["amount: sent 5, got 6"]);
    }
}
