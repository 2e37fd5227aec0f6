//! The sim's notifications to the engine: signed like webhooks (Standard
//! Webhooks) and sent again on any answer but a `2xx`, as a provider does.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::domain::webhook::WebhookSecret;

/// Tries of one notification before the sim gives up on it.
pub const NOTIFY_TRIES_MAX: u32 = 10;
/// First pause between two tries; doubles, up to [`NOTIFY_RETRY_CAP`].
const NOTIFY_RETRY_BASE: Duration = Duration::from_millis(200);
const NOTIFY_RETRY_CAP: Duration = Duration::from_secs(10);
/// Bound on one notification request.
const NOTIFY_TIMEOUT: Duration = Duration::from_secs(5);

/// Sends signed notifications.
pub struct Notifier {
    client: reqwest::Client,
    url: String,
    secret: WebhookSecret,
    /// Probability a notification is sent twice.
    pub duplicate_rate: f64,
    /// Probability a decision's notification is never sent.
    pub drop_rate: f64,
    /// Probability a return's notification is never sent (every retry of
    /// it lost: an outage longer than the provider's retries).
    pub return_drop_rate: f64,
    /// Probability a notification is held back, so a later one overtakes it.
    pub reorder_rate: f64,
}

impl Notifier {
    /// Notifications to `url`, signed with `secret`.
    pub fn new(url: String, secret: WebhookSecret) -> std::io::Result<Self> {
        let client = reqwest::Client::builder()
            .timeout(NOTIFY_TIMEOUT)
            .build()
            .map_err(std::io::Error::other)?;
        Ok(Self {
            client,
            url,
            secret,
            duplicate_rate: 0.0,
            drop_rate: 0.0,
            return_drop_rate: 0.0,
            reorder_rate: 0.0,
        })
    }

    /// Sends one notification until the receiver answers `2xx`, at most
    /// [`NOTIFY_TRIES_MAX`] times; each try is signed anew.
    pub async fn deliver(&self, id: &str, body: &str) -> bool {
        let mut pause = NOTIFY_RETRY_BASE;
        for _ in 0..NOTIFY_TRIES_MAX {
            let at = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs() as i64;
            let answer = self
                .client
                .post(&self.url)
                .header("content-type", "application/json")
                .header("webhook-id", id)
                .header("webhook-timestamp", at.to_string())
                .header(
                    "webhook-signature",
                    self.secret.sign(id, at, body.as_bytes()),
                )
                .body(body.to_owned())
                .send()
                .await;
            match answer {
                Ok(r) if r.status().is_success() => return true,
                Ok(r) => {
                    tracing::debug!(id, status = %r.status(), "notification refused; sending it again")
                }
                Err(e) => {
                    tracing::debug!(id, error = %e, "notification not delivered; sending it again")
                }
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(NOTIFY_RETRY_CAP);
        }
        tracing::warn!(id, "notification given up after every try");
        false
    }
}
