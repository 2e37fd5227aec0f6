//! Signed provider notifications, applied in batches: one transaction
//! records the new notification ids and applies their reports, so a
//! notification is applied once however often the provider sends it.

use std::time::Duration;

use uuid::Uuid;

use super::status::{Applied, Source};
use super::{Db, StoreError};
use crate::domain::ProviderReport;

/// Records the ids not seen before (with their transfer and what they
/// said, for the console's timeline) and answers them.
const RECORD: &str = "
INSERT INTO provider_notifications (id, transfer_id, reported)
SELECT * FROM UNNEST($1::text[], $2::uuid[], $3::text[])
ON CONFLICT DO NOTHING RETURNING id";

/// Deletes up to `$2` notification ids received before `$1` seconds ago.
const PURGE: &str = "
DELETE FROM provider_notifications WHERE id IN (
    SELECT id FROM provider_notifications
    WHERE received_at < now() - make_interval(secs => $1)
    ORDER BY received_at LIMIT $2)";

/// One verified notification.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// The provider's notification id (`webhook-id`): repeats carry the same.
    pub id: String,
    /// The transfer it is about.
    pub transfer_id: Uuid,
    /// What it says.
    pub report: ProviderReport,
}

/// What applying a batch of notifications did.
#[derive(Debug, Default)]
pub struct NotificationReport {
    /// Notifications seen before (by id), not applied again.
    pub repeats: usize,
    /// What the new ones did.
    pub applied: Applied,
}

/// The statements of provider notifications.
#[derive(Clone)]
pub struct NotificationStore(pub(super) Db);

impl NotificationStore {
    /// Applies the notifications not seen before, in one transaction with
    /// the record of their ids; what follows each change (lookups, return
    /// watches) as `follow` says.
    pub async fn apply(
        &self,
        batch: &[Notification],
        follow: super::status::FollowUp,
    ) -> Result<NotificationReport, StoreError> {
        assert!(!batch.is_empty(), "a batch holds a notification");
        let ids: Vec<&str> = batch.iter().map(|n| n.id.as_str()).collect();
        let transfers: Vec<Uuid> = batch.iter().map(|n| n.transfer_id).collect();
        let reported: Vec<&str> = batch.iter().map(|n| n.report.reported()).collect();
        self.0
            .with_client(|mut client| async move {
                let tx = client.transaction().await?;
                let stmt = tx.prepare_cached(RECORD).await?;
                let new: std::collections::HashSet<String> = tx
                    .query(&stmt, &[&ids, &transfers, &reported])
                    .await?
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                // One id twice in a batch is recorded once and applied once.
                let mut first = std::collections::HashSet::new();
                let reports: Vec<(Uuid, ProviderReport)> = batch
                    .iter()
                    .filter(|n| new.contains(&n.id) && first.insert(n.id.as_str()))
                    .map(|n| (n.transfer_id, n.report.clone()))
                    .collect();
                let repeats = batch.len() - reports.len();
                let applied =
                    super::status::apply(&tx, reports, Source::Notification, follow).await?;
                tx.commit().await?;
                Ok(NotificationReport { repeats, applied })
            })
            .await
    }

    /// Forgets up to `limit` notification ids older than `retention`;
    /// returns how many.
    pub async fn purge(&self, retention: Duration, limit: i64) -> Result<u64, StoreError> {
        self.0
            .with_client(|client| async move {
                let stmt = client.prepare_cached(PURGE).await?;
                Ok(client
                    .execute(&stmt, &[&retention.as_secs_f64(), &limit])
                    .await?)
            })
            .await
    }
}
