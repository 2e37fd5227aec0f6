//! Where a client wants to hear about final statuses: its endpoints, with
//! their secrets (read back to sign, so stored as they are).

use std::time::Duration;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::domain::webhook::{EndpointUrl, WebhookSecret};
use crate::domain::ClientId;
use crate::store::{Db, StoreError};

/// Endpoints: create, list, delete, rotate a secret, purge the deleted.
#[derive(Clone)]
pub struct EndpointStore(pub(in crate::store) Db);

/// An endpoint as its owner sees it (never with its secret).
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// Its id.
    pub id: Uuid,
    /// Where deliveries go.
    pub url: String,
    /// The owner's note.
    pub description: Option<String>,
    /// When it was registered.
    pub created_at: DateTime<Utc>,
    /// When a receiver answered `410 Gone` and it stopped receiving.
    pub disabled_at: Option<DateTime<Utc>>,
}

/// Why an endpoint was not created.
#[derive(Debug, thiserror::Error)]
pub enum EndpointRefused {
    /// The client already has the most endpoints allowed.
    #[error("the client has the most webhook endpoints allowed")]
    TooMany,
    /// Postgres failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn endpoint_from_row(row: &tokio_postgres::Row) -> Endpoint {
    Endpoint {
        id: row.get("id"),
        url: row.get("url"),
        description: row.get("description"),
        created_at: row.get("created_at"),
        disabled_at: row.get("disabled_at"),
    }
}

const ENDPOINT_COLUMNS: &str = "id, url, description, created_at, disabled_at";

impl EndpointStore {
    /// Registers an endpoint, unless the client already has `endpoints_max`.
    pub async fn create(
        &self,
        client: ClientId,
        url: &EndpointUrl,
        description: Option<&str>,
        secret: &WebhookSecret,
        endpoints_max: i64,
    ) -> Result<Endpoint, EndpointRefused> {
        let id = Uuid::now_v7();
        let secret = secret.encode();
        let created = self
            .0
            .with_client(|mut conn| async move {
                let tx = conn.transaction().await?;
                // The client row's lock serializes creations, so two at once
                // cannot both pass the count.
                tx.execute(
                    "SELECT 1 FROM clients WHERE id = $1 FOR NO KEY UPDATE",
                    &[&client.0],
                )
                .await?;
                let live: i64 = tx
                    .query_one(
                        "SELECT count(*) FROM webhook_endpoints WHERE client_id = $1 AND deleted_at IS NULL",
                        &[&client.0],
                    )
                    .await?
                    .get(0);
                if live >= endpoints_max {
                    return Ok(None);
                }
                let row = tx
                    .query_one(
                        &format!(
                            "INSERT INTO webhook_endpoints (id, client_id, url, description, secret) \
                             VALUES ($1, $2, $3, $4, $5) RETURNING {ENDPOINT_COLUMNS}"
                        ),
                        &[&id, &client.0, &url.as_str(), &description, &secret],
                    )
                    .await?;
                tx.commit().await?;
                Ok(Some(endpoint_from_row(&row)))
            })
            .await?;
        created.ok_or(EndpointRefused::TooMany)
    }

    /// A client's live endpoints, oldest first.
    pub async fn list(&self, client: ClientId) -> Result<Vec<Endpoint>, StoreError> {
        self.0
            .with_client(|conn| async move {
                let rows = conn
                    .query(
                        &format!(
                            "SELECT {ENDPOINT_COLUMNS} FROM webhook_endpoints \
                         WHERE client_id = $1 AND deleted_at IS NULL ORDER BY id"
                        ),
                        &[&client.0],
                    )
                    .await?;
                Ok(rows.iter().map(endpoint_from_row).collect())
            })
            .await
    }

    /// Deletes a client's endpoint: no later event goes to it, and what was
    /// pending to it is dead. False when the client has no such endpoint.
    pub async fn delete(&self, client: ClientId, id: Uuid) -> Result<bool, StoreError> {
        self.0
            .with_client(|mut conn| async move {
                let tx = conn.transaction().await?;
                let n = tx
                    .execute(
                        "UPDATE webhook_endpoints SET deleted_at = now() \
                     WHERE id = $1 AND client_id = $2 AND deleted_at IS NULL",
                        &[&id, &client.0],
                    )
                    .await?;
                if n == 1 {
                    tx.execute(
                        "UPDATE webhook_deliveries SET dead_at = now(), locked_until = NULL, \
                     last_error = 'endpoint deleted' \
                     WHERE endpoint_id = $1 AND delivered_at IS NULL AND dead_at IS NULL",
                        &[&id],
                    )
                    .await?;
                }
                tx.commit().await?;
                Ok(n == 1)
            })
            .await
    }

    /// Gives an endpoint a new secret; the old one keeps signing alongside
    /// it for `overlap`. `None` when the client has no such endpoint.
    pub async fn rotate_secret(
        &self,
        client: ClientId,
        id: Uuid,
        secret: &WebhookSecret,
        overlap: Duration,
    ) -> Result<Option<Endpoint>, StoreError> {
        let secret = secret.encode();
        self.0
            .with_client(|conn| async move {
                let row = conn
                    .query_opt(
                        &format!(
                            "UPDATE webhook_endpoints SET previous_secret = secret, \
                         previous_secret_until = now() + make_interval(secs => $4), secret = $3 \
                         WHERE id = $1 AND client_id = $2 AND deleted_at IS NULL \
                         RETURNING {ENDPOINT_COLUMNS}"
                        ),
                        &[&id, &client.0, &secret, &overlap.as_secs_f64()],
                    )
                    .await?;
                Ok(row.as_ref().map(endpoint_from_row))
            })
            .await
    }

    /// Deletes up to `batch` endpoints deleted before `before` that no
    /// delivery record names any more (their events were reaped first);
    /// returns how many went.
    pub async fn purge_deleted(
        &self,
        before: DateTime<Utc>,
        batch: i64,
    ) -> Result<u64, StoreError> {
        self.0.with_client(|conn| async move {
            Ok(conn
                .execute(
                    "DELETE FROM webhook_endpoints WHERE id = ANY(ARRAY( \
                       SELECT ep.id FROM webhook_endpoints ep \
                       WHERE ep.deleted_at < $1 \
                         AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.endpoint_id = ep.id) \
                       LIMIT $2))",
                    &[&before, &batch],
                )
                .await?)
        })
        .await
    }
}
