//! The other pages' reads: dead rows, events, endpoints, the audit and the
//! live view.

use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::{
    attach_deliveries, audit_of, endpoint_of, event_of, AuditLine, ConsoleStore, DeadRow,
    EndpointLine, EventLine, Live, LIVE_WINDOW,
};
use crate::domain::webhook::event_id_floor;
use crate::store::{capped_count, StoreError, FIGURE_ROWS_MAX};

impl ConsoleStore {
    /// Dead outbox rows whose last error contains `error` (all when
    /// `None`), most recently dead first, and how many match in all.
    pub async fn dead_rows(
        &self,
        error: Option<&str>,
        limit: i64,
    ) -> Result<(Vec<DeadRow>, i64), StoreError> {
        let error = error.map(str::to_owned);
        self.write
            .with_client(|client| async move {
                let page: [&(dyn ToSql + Sync); 2] = [&error, &limit];
                let all: [&(dyn ToSql + Sync); 1] = [&error];
                let (rows, count) = futures::try_join!(
                    client.query(
                        "SELECT o.transfer_id, t.client_id, t.amount, t.currency, o.attempts,
                                o.last_error, o.ambiguous, o.dead_at
                         FROM outbox o JOIN transfers t ON t.id = o.transfer_id
                         WHERE o.dead_at IS NOT NULL
                           AND ($1::text IS NULL OR strpos(o.last_error, $1) > 0)
                         ORDER BY o.dead_at DESC, o.transfer_id LIMIT $2",
                        &page,
                    ),
                    client.query_one(
                        "SELECT count(*) FROM outbox o WHERE o.dead_at IS NOT NULL \
                         AND ($1::text IS NULL OR strpos(o.last_error, $1) > 0)",
                        &all,
                    ),
                )?;
                let rows = rows
                    .iter()
                    .map(|r| DeadRow {
                        transfer_id: r.get(0),
                        client_id: r.get(1),
                        amount: r.get(2),
                        currency: r.get(3),
                        attempts: r.get(4),
                        last_error: r.get(5),
                        ambiguous: r.get(6),
                        dead_at: r.get(7),
                    })
                    .collect();
                Ok((rows, count.get(0)))
            })
            .await
    }

    /// A page of webhook events across clients, newest first, older than
    /// `before`; only those with a dead delivery with `dead_only`. (One
    /// transfer's events are on its timeline.)
    pub async fn events(
        &self,
        dead_only: bool,
        before: Option<Uuid>,
        page: i64,
    ) -> Result<(Vec<EventLine>, Option<Uuid>), StoreError> {
        self.write
            .with_client(|client| async move {
                let rows = if dead_only {
                    client
                        .query(
                            "SELECT e.id, e.client_id, e.transfer_id, e.type, e.created_at
                             FROM webhook_events e
                             WHERE e.id IN (SELECT event_id FROM webhook_deliveries
                                            WHERE dead_at IS NOT NULL
                                              AND ($1::uuid IS NULL OR event_id < $1))
                             ORDER BY e.id DESC LIMIT $2",
                            &[&before, &(page + 1)],
                        )
                        .await?
                } else {
                    client
                        .query(
                            "SELECT id, client_id, transfer_id, type, created_at FROM webhook_events
                             WHERE ($1::uuid IS NULL OR id < $1)
                             ORDER BY id DESC LIMIT $2",
                            &[&before, &(page + 1)],
                        )
                        .await?
                };
                let mut events: Vec<EventLine> = rows.iter().map(event_of).collect();
                let next = if events.len() as i64 > page {
                    events.truncate(page as usize);
                    events.last().map(|e| e.id)
                } else {
                    None
                };
                attach_deliveries(&client, &mut events).await?;
                Ok((events, next))
            })
            .await
    }

    /// Endpoints that need an operator: disabled ones, and live ones with
    /// dead deliveries.
    pub async fn endpoints(&self, limit: i64) -> Result<Vec<EndpointLine>, StoreError> {
        self.write
            .with_client(|client| async move {
                let rows = client
                    .query(
                        "WITH dead AS (SELECT endpoint_id, count(*) AS n FROM webhook_deliveries
                                       WHERE dead_at IS NOT NULL GROUP BY endpoint_id)
                         SELECT ep.id, ep.client_id, ep.url, ep.disabled_at, COALESCE(dead.n, 0)
                         FROM webhook_endpoints ep LEFT JOIN dead ON dead.endpoint_id = ep.id
                         WHERE ep.deleted_at IS NULL AND (ep.disabled_at IS NOT NULL OR dead.n > 0)
                         ORDER BY ep.disabled_at DESC NULLS LAST, dead.n DESC, ep.id LIMIT $1",
                        &[&limit],
                    )
                    .await?;
                Ok(rows.iter().map(endpoint_of).collect())
            })
            .await
    }

    /// One endpoint, when it needs an operator (disabled, or with dead
    /// deliveries).
    pub async fn endpoint(&self, id: Uuid) -> Result<Option<EndpointLine>, StoreError> {
        self.write
            .with_client(|client| async move {
                let row = client
                    .query_opt(
                        "SELECT * FROM (
                             SELECT ep.id, ep.client_id, ep.url, ep.disabled_at,
                                    (SELECT count(*) FROM webhook_deliveries d
                                     WHERE d.endpoint_id = ep.id AND d.dead_at IS NOT NULL) AS dead
                             FROM webhook_endpoints ep WHERE ep.id = $1 AND ep.deleted_at IS NULL) e
                         WHERE e.disabled_at IS NOT NULL OR e.dead > 0",
                        &[&id],
                    )
                    .await?;
                Ok(row.as_ref().map(endpoint_of))
            })
            .await
    }

    /// A page of the audit, newest first, older than `before`.
    pub async fn audit(
        &self,
        before: Option<i64>,
        page: i64,
    ) -> Result<(Vec<AuditLine>, Option<i64>), StoreError> {
        self.write
            .with_client(|client| async move {
                let rows = client
                    .query(
                        "SELECT id, operator_name, action, target, rows_touched, at FROM operator_audit \
                         WHERE ($1::int8 IS NULL OR id < $1) ORDER BY id DESC LIMIT $2",
                        &[&before, &(page + 1)],
                    )
                    .await?;
                let mut lines: Vec<AuditLine> = rows.iter().map(audit_of).collect();
                let next = if lines.len() as i64 > page {
                    lines.truncate(page as usize);
                    lines.last().map(|l| l.id)
                } else {
                    None
                };
                Ok((lines, next))
            })
            .await
    }

    /// Creates and settlements per second over the last few seconds, and
    /// the backlogs.
    pub async fn live(&self) -> Result<Live, StoreError> {
        let since = event_id_floor(std::time::SystemTime::now() - LIVE_WINDOW);
        let window = LIVE_WINDOW.as_secs_f64();
        self.write
            .with_client(|client| async move {
                // Each backlog counted up to FIGURE_ROWS_MAX rows.
                let backlogs = [
                    "FROM outbox WHERE dead_at IS NULL",
                    "FROM outbox WHERE dead_at IS NOT NULL",
                    "FROM webhook_deliveries WHERE delivered_at IS NULL AND dead_at IS NULL",
                    "FROM webhook_deliveries WHERE dead_at IS NOT NULL",
                    "FROM provider_polls",
                ]
                .map(|from_where| capped_count(from_where, "$2"));
                let sql = format!(
                    "SELECT (SELECT count(*) FROM transfers WHERE id >= $1), \
                     (SELECT count(*) FROM webhook_events WHERE id >= $1 \
                        AND type IN ('transfer.succeeded', 'transfer.failed')), {}",
                    backlogs.join(", ")
                );
                let row = client.query_one(&sql, &[&since, &FIGURE_ROWS_MAX]).await?;
                Ok(Live {
                    creates_per_second: row.get::<_, i64>(0) as f64 / window,
                    settlements_per_second: row.get::<_, i64>(1) as f64 / window,
                    outbox_backlog: row.get(2),
                    outbox_dead: row.get(3),
                    deliveries_backlog: row.get(4),
                    deliveries_dead: row.get(5),
                    processing: row.get(6),
                })
            })
            .await
    }
}
