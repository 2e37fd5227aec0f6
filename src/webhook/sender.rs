//! One delivery attempt over HTTP: Standard Webhooks headers, a bounded
//! wait and a bounded read of the answer, and no way into this host's
//! private network unless the operator allows it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::domain::webhook::{signature_header, AddressPolicy, EndpointUrl, WebhookSecret};
use crate::provider::http::{describe_transport_error, parse_retry_after, read_head};

/// What a receiver said, or why it said nothing.
#[derive(Debug, Clone, PartialEq)]
pub enum Attempt {
    /// It answered; `excerpt` is at most the configured number of bytes of
    /// its body, as text.
    Answered {
        /// The HTTP status.
        status: u16,
        /// Its `Retry-After`, if any.
        retry_after: Option<Duration>,
        /// The start of its body.
        excerpt: String,
    },
    /// No answer: refused, reset, timed out, or an address the policy refuses.
    NoAnswer(String),
}

/// Resolves host names and drops the addresses the policy refuses, so a
/// name that points (or is re-pointed, DNS rebinding) at a private address
/// is never connected to.
struct GuardedResolver {
    policy: AddressPolicy,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let policy = self.policy;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let resolved: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .filter(|a| policy.allows(a.ip()))
                .collect();
            if resolved.is_empty() {
                let refused = format!("{host} resolves to no address webhooks may be sent to");
                return Err(refused.into());
            }
            let addrs: Addrs = Box::new(resolved.into_iter());
            Ok(addrs)
        })
    }
}

/// Sends deliveries.
#[derive(Clone)]
pub struct Sender {
    client: reqwest::Client,
    policy: AddressPolicy,
    excerpt_bytes: usize,
}

impl Sender {
    /// A sender whose every attempt ends within `timeout` and reads at most
    /// `excerpt_bytes` of an answer.
    pub fn new(
        timeout: Duration,
        policy: AddressPolicy,
        excerpt_bytes: usize,
    ) -> reqwest::Result<Self> {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .user_agent(concat!("payrail-webhooks/", env!("CARGO_PKG_VERSION")))
            // A redirect could lead anywhere, a private address included.
            .redirect(reqwest::redirect::Policy::none())
            // A proxy would resolve names where the guard cannot see.
            .no_proxy()
            .dns_resolver(Arc::new(GuardedResolver { policy }))
            .build()?;
        Ok(Self {
            client,
            policy,
            excerpt_bytes,
        })
    }

    /// POSTs `body` to `url`, signed with every secret (the current first).
    pub async fn send(
        &self,
        url: &EndpointUrl,
        event_id: &str,
        body: &str,
        secrets: &[WebhookSecret],
    ) -> Attempt {
        // An address literal never meets the resolver: check it here, and
        // again now rather than at registration, since the policy may differ.
        if let Err(e) = EndpointUrl::parse(url.as_str(), self.policy) {
            return Attempt::NoAnswer(format!("url {e}"));
        }
        let timestamp = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let secrets: Vec<&WebhookSecret> = secrets.iter().collect();
        let signature = signature_header(&secrets, event_id, timestamp, body.as_bytes());
        assert_eq!(
            signature.split(' ').count(),
            secrets.len(),
            "one signature per secret"
        );
        let sent = self
            .client
            .post(url.as_url().clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("webhook-id", event_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body.to_owned())
            .send()
            .await;
        let mut response = match sent {
            Ok(r) => r,
            Err(e) => return Attempt::NoAnswer(describe_transport_error(&e)),
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, SystemTime::now()));
        // Only the start of the answer is kept, for `last_error`. A body
        // that breaks off keeps what arrived; the status decides anyway.
        let mut head = Vec::new();
        let _ = read_head(&mut response, self.excerpt_bytes, &mut head).await;
        Attempt::Answered {
            status,
            retry_after,
            excerpt: String::from_utf8_lossy(&head).into_owned(),
        }
    }
}
