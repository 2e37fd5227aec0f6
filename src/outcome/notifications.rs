//! Provider notifications: verified at the edge (`api`), then applied in
//! batches by one task, as shards group-commit creates: while one batch's
//! transaction runs, the notifications that arrive wait for the next, so
//! batches grow with load and a burst of thousands per second costs a
//! few transactions, not thousands. Each request is answered once its
//! batch committed.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use tokio::sync::{mpsc, oneshot};
use uuid::Uuid;

use crate::domain::webhook::WebhookSecret;
use crate::domain::{ProviderReport, ProviderText};
use crate::queue::window::{SETTLE_RETRY_DELAY, SETTLE_TRIES_MAX};
use crate::store::notifications::{Notification, NotificationStore};
use crate::store::status::FollowUp;
use crate::store::StoreError;

/// Longest notification id accepted (`webhook-id`).
pub const NOTIFICATION_ID_LEN_MAX: usize = 255;

/// Why a notification was refused before it reached Postgres.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Missing or bad signature headers, a signature no configured secret
    /// made, or a timestamp outside the tolerance.
    #[error("notification not authenticated: {0}")]
    Unauthenticated(&'static str),
    /// Signed, but not a notification this engine understands.
    #[error("malformed notification: {0}")]
    Malformed(String),
}

/// The signing secrets and the clock tolerance.
#[derive(Debug, Clone)]
pub struct Verifier {
    secrets: Arc<[WebhookSecret]>,
    tolerance: Duration,
}

impl Verifier {
    /// Verifies against any of `secrets` (at least one).
    pub fn new(secrets: Vec<WebhookSecret>, tolerance: Duration) -> Self {
        assert!(!secrets.is_empty(), "a verifier has a secret");
        Self {
            secrets: secrets.into(),
            tolerance,
        }
    }

    /// Checks the Standard Webhooks headers and parses the body.
    pub fn verify(
        &self,
        id: Option<&str>,
        timestamp: Option<&str>,
        signature: Option<&str>,
        body: &[u8],
        now: SystemTime,
    ) -> Result<Notification, Refusal> {
        let (Some(id), Some(timestamp), Some(signature)) = (id, timestamp, signature) else {
            return Err(Refusal::Unauthenticated(
                "webhook-id, webhook-timestamp and webhook-signature are required",
            ));
        };
        let timestamp: i64 = timestamp
            .parse()
            .map_err(|_| Refusal::Unauthenticated("webhook-timestamp is not a Unix time"))?;
        let now = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() as i64;
        if timestamp.abs_diff(now) > self.tolerance.as_secs() {
            return Err(Refusal::Unauthenticated(
                "webhook-timestamp is too far from now",
            ));
        }
        if !self
            .secrets
            .iter()
            .any(|s| s.verify(signature, id, timestamp, body))
        {
            return Err(Refusal::Unauthenticated("no valid signature"));
        }
        // Only now, signed: an id is the provider's word, not a stranger's.
        if id.is_empty() || id.len() > NOTIFICATION_ID_LEN_MAX {
            return Err(Refusal::Malformed(format!(
                "webhook-id must be 1 to {NOTIFICATION_ID_LEN_MAX} bytes"
            )));
        }
        parse(id, body)
    }
}

#[derive(Deserialize)]
struct Body {
    #[serde(rename = "type")]
    kind: String,
    data: Data,
}

#[derive(Deserialize)]
struct Data {
    transfer_id: Uuid,
    status: String,
    reference: Option<String>,
    reason: Option<String>,
}

/// `{"type": "payout.updated", "data": {"transfer_id", "status",
/// "reference", "reason"}}`; other fields are ignored, as a provider adds
/// fields freely.
fn parse(id: &str, body: &[u8]) -> Result<Notification, Refusal> {
    let body: Body = serde_json::from_slice(body).map_err(|e| Refusal::Malformed(e.to_string()))?;
    if body.kind != "payout.updated" {
        return Err(Refusal::Malformed(format!(
            "unknown type {:?}",
            body.kind.chars().take(40).collect::<String>()
        )));
    }
    let d = body.data;
    let text = |s: &Option<String>| s.as_deref().map(ProviderText::clean);
    let report = match d.status.as_str() {
        "processing" => ProviderReport::Processing {
            reference: text(&d.reference),
        },
        "succeeded" => ProviderReport::Succeeded {
            reference: text(&d.reference),
        },
        "declined" | "failed" => ProviderReport::Declined {
            reason: ProviderText::clean(d.reason.as_deref().unwrap_or("declined")),
        },
        "returned" => ProviderReport::Returned {
            reference: text(&d.reference),
            reason: ProviderText::clean(d.reason.as_deref().unwrap_or("returned")),
        },
        other => {
            return Err(Refusal::Malformed(format!(
                "unknown status {:?}",
                other.chars().take(40).collect::<String>()
            )))
        }
    };
    Ok(Notification {
        id: id.to_owned(),
        transfer_id: d.transfer_id,
        report,
    })
}

/// Why a verified notification was not recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IntakeError {
    /// Too many wait for their batch; the provider should send it again.
    #[error("too many notifications waiting")]
    Full,
    /// Postgres did not record the batch.
    #[error("the notification could not be recorded")]
    Unavailable,
}

type Waiting = (Notification, oneshot::Sender<Result<(), IntakeError>>);

/// Hands verified notifications to the batching task.
#[derive(Clone)]
pub struct Intake {
    queue: mpsc::Sender<Waiting>,
    verifier: Verifier,
    body_max: usize,
    /// Refused before the queue: unauthenticated, malformed.
    refused: [metrics::Counter; 2],
}

impl Intake {
    /// The signature check.
    pub fn verifier(&self) -> &Verifier {
        &self.verifier
    }

    /// Largest body read, in bytes.
    pub fn body_max(&self) -> usize {
        self.body_max
    }

    /// Counts a notification the verifier refused.
    pub fn count_refusal(&self, refusal: &Refusal) {
        let i = match refusal {
            Refusal::Unauthenticated(_) => 0,
            Refusal::Malformed(_) => 1,
        };
        self.refused[i].increment(1);
    }

    /// Applies `n` with the next batch; answers once that committed.
    pub async fn submit(&self, n: Notification) -> Result<(), IntakeError> {
        let (done, answer) = oneshot::channel();
        self.queue
            .try_send((n, done))
            .map_err(|_| IntakeError::Full)?;
        answer.await.unwrap_or(Err(IntakeError::Unavailable))
    }
}

/// Bounds of the intake.
#[derive(Debug, Clone, Copy)]
pub struct IntakeLimits {
    /// Most notifications waiting.
    pub queue_max: usize,
    /// Most per transaction.
    pub batch_max: usize,
    /// Largest body, in bytes.
    pub body_max: usize,
    /// What follows the changes notifications make.
    pub follow: FollowUp,
}

/// Metrics, registered once.
struct IntakeMetrics {
    applied: metrics::Counter,
    repeats: metrics::Counter,
    unknown: metrics::Counter,
    anomalies: metrics::Counter,
    late: metrics::Counter,
    failed: metrics::Counter,
    batch_size: metrics::Histogram,
    creation_to_final: metrics::Histogram,
}

impl IntakeMetrics {
    fn new() -> Self {
        let c = |o: &'static str| metrics::counter!("payrail_provider_notifications_total", "outcome" => o);
        Self {
            applied: c("applied"),
            repeats: c("repeat"),
            unknown: c("unknown_transfer"),
            anomalies: metrics::counter!("payrail_transfer_anomalies_total", "source" => "notification"),
            late: c("late"),
            failed: c("not_recorded"),
            batch_size: metrics::histogram!("payrail_provider_notification_batch_size"),
            creation_to_final: metrics::histogram!("payrail_transfer_creation_to_final_seconds"),
        }
    }
}

/// Starts the batching task on `arbiter`.
pub fn start(
    arbiter: &actix::Arbiter,
    store: NotificationStore,
    verifier: Verifier,
    limits: IntakeLimits,
) -> Intake {
    assert!(limits.batch_max > 0 && limits.queue_max > 0);
    let (queue, mut incoming) = mpsc::channel::<Waiting>(limits.queue_max);
    arbiter.spawn(async move {
        let m = IntakeMetrics::new();
        let mut batch: Vec<Waiting> = Vec::with_capacity(limits.batch_max);
        while incoming.recv_many(&mut batch, limits.batch_max).await > 0 {
            assert!(batch.len() <= limits.batch_max, "a batch keeps its bound");
            m.batch_size.record(batch.len() as f64);
            let notifications: Vec<Notification> = batch.iter().map(|(n, _)| n.clone()).collect();
            let result = apply_with_retries(&store, &notifications, limits.follow).await;
            let answer = match result {
                Ok(report) => {
                    let a = &report.applied;
                    m.repeats.increment(report.repeats as u64);
                    m.applied.increment(a.changed.len() as u64);
                    m.unknown.increment(a.unknown.len() as u64);
                    m.anomalies.increment(a.anomalies as u64);
                    m.late.increment(a.late as u64);
                    for age in &a.creation_to_final {
                        m.creation_to_final.record(age.as_secs_f64());
                    }
                    for id in &a.unknown {
                        tracing::warn!(transfer_id = %id, "provider notification about an unknown transfer");
                    }
                    Ok(())
                }
                Err(e) => {
                    tracing::warn!(error = %e, n = notifications.len(), "notifications not recorded; the provider sends them again");
                    m.failed.increment(notifications.len() as u64);
                    Err(IntakeError::Unavailable)
                }
            };
            for (_, done) in batch.drain(..) {
                let _ = done.send(answer);
            }
        }
    });
    Intake {
        queue,
        verifier,
        body_max: limits.body_max,
        refused: ["unauthenticated", "malformed"]
            .map(|o| metrics::counter!("payrail_provider_notifications_total", "outcome" => o)),
    }
}

/// A batch refused as a whole (a deadlock with a settlement touching the
/// same transfers, a connection lost) is tried again, like a settlement.
async fn apply_with_retries(
    store: &NotificationStore,
    batch: &[Notification],
    follow: FollowUp,
) -> Result<crate::store::notifications::NotificationReport, StoreError> {
    let mut tries = 0;
    loop {
        tries += 1;
        match store.apply(batch, follow).await {
            Ok(r) => return Ok(r),
            Err(e) if tries < SETTLE_TRIES_MAX => {
                tracing::info!(error = %e, tries, "notification batch refused; trying again");
                tokio::time::sleep(SETTLE_RETRY_DELAY).await;
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signed(secret: &WebhookSecret, id: &str, at: i64, body: &str) -> String {
        secret.sign(id, at, body.as_bytes())
    }

    #[test]
    fn a_notification_is_verified_then_parsed() {
        let old = WebhookSecret::generate();
        let new = WebhookSecret::generate();
        let v = Verifier::new(vec![new.clone(), old.clone()], Duration::from_secs(300));
        let now = SystemTime::now();
        let at = now.duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
        let id = Uuid::now_v7();
        let body = format!(
            r#"{{"type":"payout.updated","data":{{"transfer_id":"{id}","status":"returned","reason":"account_closed","extra":1}}}}"#
        );
        // Either secret of a rotation verifies.
        for s in [&old, &new] {
            let n = v
                .verify(
                    Some("ntf_1"),
                    Some(&at.to_string()),
                    Some(&signed(s, "ntf_1", at, &body)),
                    body.as_bytes(),
                    now,
                )
                .unwrap();
            assert_eq!(n.transfer_id, id);
            assert_eq!(n.report.reported(), "returned");
        }
        let sig = signed(&new, "ntf_1", at, &body);
        // Another secret, another id, an old timestamp, a changed body.
        let stranger = WebhookSecret::generate();
        let refusals = [
            v.verify(
                Some("ntf_1"),
                Some(&at.to_string()),
                Some(&signed(&stranger, "ntf_1", at, &body)),
                body.as_bytes(),
                now,
            ),
            v.verify(
                Some("ntf_2"),
                Some(&at.to_string()),
                Some(&sig),
                body.as_bytes(),
                now,
            ),
            v.verify(
                Some("ntf_1"),
                Some(&(at - 301).to_string()),
                Some(&signed(&new, "ntf_1", at - 301, &body)),
                body.as_bytes(),
                now,
            ),
            v.verify(Some("ntf_1"), Some(&at.to_string()), Some(&sig), b"{}", now),
            v.verify(
                None,
                Some(&at.to_string()),
                Some(&sig),
                body.as_bytes(),
                now,
            ),
        ];
        for r in refusals {
            assert!(matches!(r, Err(Refusal::Unauthenticated(_))), "{r:?}");
        }
        // Signed but not understood.
        let bad = r#"{"type":"payout.updated","data":{"transfer_id":"x","status":"succeeded"}}"#;
        let r = v.verify(
            Some("n"),
            Some(&at.to_string()),
            Some(&signed(&new, "n", at, bad)),
            bad.as_bytes(),
            now,
        );
        assert!(matches!(r, Err(Refusal::Malformed(_))), "{r:?}");
    }
}
