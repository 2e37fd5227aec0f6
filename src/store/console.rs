//! The operator console's statements: operators and sessions, the pages'
//! reads, and the repairs, each audited in its own transaction.
//!
//! Every read is bounded and uses an index: keyset pages (never `OFFSET`,
//! never `COUNT(*)` over transfers), and filters the indexes cannot serve
//! (status, provider reference) are applied to a bounded scan of the newest
//! transfers, so a page costs the same on a table of a million rows as on
//! one of a thousand and says when it stopped looking.

use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio_postgres::types::ToSql;
use uuid::Uuid;

use super::webhooks::{
    deliveries_of, requeue_deliveries, DeliveryRecord, DELIVERIES, WEBHOOK_CHANNEL,
};
use super::{Store, StoreError};
use crate::domain::webhook::event_id_floor;
use crate::domain::{ConsoleSecret, ConsoleSecretHash, Transfer, TransferStatus};

/// A signed-in operator, as a request's session names them.
#[derive(Debug, Clone)]
pub struct OperatorSession {
    /// The operator.
    pub operator_id: Uuid,
    /// Their name, for the page header and the audit.
    pub operator_name: String,
    /// The session's CSRF token: every state-changing request carries it.
    pub csrf_token: String,
    /// When the session ends.
    pub expires_at: DateTime<Utc>,
}

/// Filters of the transfers page; each is optional.
#[derive(Debug, Clone, Default)]
pub struct TransferFilter {
    /// Only this status.
    pub status: Option<TransferStatus>,
    /// Only this client's.
    pub client_id: Option<Uuid>,
    /// Only this provider reference.
    pub provider_reference: Option<String>,
    /// Created at or after.
    pub from: Option<DateTime<Utc>>,
    /// Created before.
    pub to: Option<DateTime<Utc>>,
}

/// One line of the transfers page.
#[derive(Debug, Clone)]
pub struct TransferLine {
    /// The transfer.
    pub id: Uuid,
    /// Its client.
    pub client_id: Uuid,
    /// Its idempotency key.
    pub idempotency_key: String,
    /// Its status.
    pub status: String,
    /// Minor units.
    pub amount: i64,
    /// ISO 4217.
    pub currency: String,
    /// The provider's reference, once known.
    pub provider_reference: Option<String>,
    /// When it was created.
    pub created_at: DateTime<Utc>,
}

/// A keyset page of transfers, newest first.
#[derive(Debug, Clone)]
pub struct TransferLines {
    /// At most a page of matches.
    pub lines: Vec<TransferLine>,
    /// Where the next page starts (exclusive), when there may be one.
    pub next: Option<Uuid>,
    /// The page stopped after scanning this many transfers without filling
    /// up: older matches may exist past `next`.
    pub scan_exhausted: Option<i64>,
}

/// The idempotency key row of a transfer, while it is kept.
#[derive(Debug, Clone)]
pub struct KeyRecord {
    /// When the first attempt stored it.
    pub created_at: DateTime<Utc>,
    /// When the reaper forgets it.
    pub expires_at: DateTime<Utc>,
    /// The status every replay answers.
    pub response_status: i32,
}

/// One provider call the relay made.
#[derive(Debug, Clone)]
pub struct AttemptRecord {
    /// The claim's number.
    pub attempt: i32,
    /// How it ended.
    pub outcome: String,
    /// The provider's reference or reason, or the error.
    pub detail: Option<String>,
    /// When its outcome was recorded.
    pub at: DateTime<Utc>,
}

/// The transfer's outbox row, while it has one.
#[derive(Debug, Clone)]
pub struct OutboxRecord {
    /// Claims so far.
    pub attempts: i32,
    /// When it is next due.
    pub available_at: DateTime<Utc>,
    /// The last failure.
    pub last_error: Option<String>,
    /// When it was dead-lettered.
    pub dead_at: Option<DateTime<Utc>>,
    /// Some call's outcome is unknown.
    pub ambiguous: bool,
}

/// The transfer's status lookups, while it is `processing`.
#[derive(Debug, Clone)]
pub struct PollRecord {
    /// Lookups so far.
    pub attempts: i32,
    /// Since when it has been `processing`.
    pub processing_since: DateTime<Utc>,
    /// When it is looked up next.
    pub next_poll_at: DateTime<Utc>,
    /// What the last lookup found.
    pub last_error: Option<String>,
}

/// A provider notification about the transfer.
#[derive(Debug, Clone)]
pub struct NotificationRecord {
    /// The provider's notification id.
    pub id: String,
    /// What it reported.
    pub reported: Option<String>,
    /// When it arrived.
    pub received_at: DateTime<Utc>,
}

/// A webhook event and its deliveries.
#[derive(Debug, Clone)]
pub struct EventLine {
    /// The event.
    pub id: Uuid,
    /// Its client.
    pub client_id: Uuid,
    /// Its transfer.
    pub transfer_id: Uuid,
    /// `transfer.succeeded` and so on.
    pub kind: String,
    /// When it was made (the status change's time).
    pub created_at: DateTime<Utc>,
    /// Its deliveries, by endpoint.
    pub deliveries: Vec<DeliveryRecord>,
}

/// An operator action as the audit keeps it.
#[derive(Debug, Clone)]
pub struct AuditLine {
    /// Its number, newest highest.
    pub id: i64,
    /// Who.
    pub operator_name: String,
    /// What (`outbox.retry`, `event.redeliver`, ...).
    pub action: String,
    /// On what: a transfer, an event, an endpoint, or a filter.
    pub target: String,
    /// How many rows it changed.
    pub rows_touched: i64,
    /// When.
    pub at: DateTime<Utc>,
}

/// Everything known about one transfer, for its timeline.
#[derive(Debug, Clone)]
pub struct Timeline {
    /// The transfer, with its anomalies.
    pub transfer: Transfer,
    /// Its idempotency key's row, until the key expires.
    pub key: Option<KeyRecord>,
    /// Every provider call, in order.
    pub attempts: Vec<AttemptRecord>,
    /// Its outbox row, while not final.
    pub outbox: Option<OutboxRecord>,
    /// Its lookups, while `processing`.
    pub poll: Option<PollRecord>,
    /// Notifications about it, in arrival order.
    pub notifications: Vec<NotificationRecord>,
    /// Its events (one per status change) and their deliveries.
    pub events: Vec<EventLine>,
    /// False when some status change's event is gone (deleted after
    /// `--event-retention`).
    pub events_complete: bool,
    /// Operator actions on it.
    pub audit: Vec<AuditLine>,
}

/// A dead-lettered outbox row.
#[derive(Debug, Clone)]
pub struct DeadRow {
    /// The transfer.
    pub transfer_id: Uuid,
    /// Its client.
    pub client_id: Uuid,
    /// Minor units.
    pub amount: i64,
    /// ISO 4217.
    pub currency: String,
    /// Claims so far.
    pub attempts: i32,
    /// The last failure.
    pub last_error: Option<String>,
    /// Some call's outcome is unknown.
    pub ambiguous: bool,
    /// When it was dead-lettered.
    pub dead_at: DateTime<Utc>,
}

/// A webhook endpoint that needs an operator: disabled, or with dead
/// deliveries.
#[derive(Debug, Clone)]
pub struct EndpointLine {
    /// The endpoint.
    pub id: Uuid,
    /// Its client.
    pub client_id: Uuid,
    /// Where it delivers.
    pub url: String,
    /// When it was disabled, if it is.
    pub disabled_at: Option<DateTime<Utc>>,
    /// Its dead deliveries.
    pub dead: i64,
}

/// Rates and backlogs for the live view, from the database, so every
/// `serve` process shows the same figures.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Live {
    /// Transfers created per second over the last window.
    pub creates_per_second: f64,
    /// Transfers that reached `succeeded` or `failed` per second.
    pub settlements_per_second: f64,
    /// Outbox rows not yet final and not dead.
    pub outbox_backlog: i64,
    /// Dead outbox rows.
    pub outbox_dead: i64,
    /// Webhook deliveries neither delivered nor dead.
    pub deliveries_backlog: i64,
    /// Dead deliveries.
    pub deliveries_dead: i64,
    /// Transfers `processing`.
    pub processing: i64,
}

/// The window over which the live view's rates are counted: short enough
/// to follow load, long enough to smooth a group commit's bursts.
const LIVE_WINDOW: Duration = Duration::from_secs(5);

/// The console's statements.
#[derive(Clone)]
pub struct ConsoleStore(pub(super) Store);

impl ConsoleStore {
    /// Makes an operator and their token; only the token's hash is kept.
    pub async fn create_operator(&self, name: &str) -> Result<(Uuid, ConsoleSecret), StoreError> {
        let id = Uuid::now_v7();
        let token = ConsoleSecret::operator_token();
        let hash = token.hash();
        self.0
            .with_client(|client| async move {
                client
                    .execute(
                        "INSERT INTO operators (id, name, token_hash) VALUES ($1, $2, $3)",
                        &[&id, &name, &hash.0.as_slice()],
                    )
                    .await?;
                Ok(())
            })
            .await?;
        Ok((id, token))
    }

    /// Revokes a live operator token and ends its sessions at once; false
    /// when no live token matches.
    pub async fn revoke_operator(&self, hash: &ConsoleSecretHash) -> Result<bool, StoreError> {
        self.0
            .with_client(|mut client| async move {
                let tx = client.transaction().await?;
                let row = tx
                    .query_opt(
                        "UPDATE operators SET revoked_at = now() \
                         WHERE token_hash = $1 AND revoked_at IS NULL RETURNING id",
                        &[&hash.0.as_slice()],
                    )
                    .await?;
                let Some(row) = row else { return Ok(false) };
                let id: Uuid = row.get(0);
                tx.execute(
                    "DELETE FROM operator_sessions WHERE operator_id = $1",
                    &[&id],
                )
                .await?;
                tx.commit().await?;
                Ok(true)
            })
            .await
    }

    /// Opens a session for the operator holding `token`, for `ttl`; `None`
    /// when no live operator has it. Expired sessions are cleared on the way
    /// (a bounded number), so the table holds live ones and a few more.
    pub async fn sign_in(
        &self,
        token: &ConsoleSecretHash,
        session: &ConsoleSecretHash,
        csrf_token: &str,
        ttl: Duration,
    ) -> Result<Option<String>, StoreError> {
        self.0
            .with_client(|mut client| async move {
                let tx = client.transaction().await?;
                let Some(op) = tx
                    .query_opt(
                        "SELECT id, name FROM operators WHERE token_hash = $1 AND revoked_at IS NULL",
                        &[&token.0.as_slice()],
                    )
                    .await?
                else {
                    return Ok(None);
                };
                let (id, name): (Uuid, String) = (op.get(0), op.get(1));
                tx.execute(
                    "DELETE FROM operator_sessions WHERE secret_hash IN (\
                     SELECT secret_hash FROM operator_sessions WHERE expires_at < now() LIMIT 1000)",
                    &[],
                )
                .await?;
                tx.execute(
                    "INSERT INTO operator_sessions (secret_hash, operator_id, csrf_token, expires_at) \
                     VALUES ($1, $2, $3, now() + make_interval(secs => $4))",
                    &[&session.0.as_slice(), &id, &csrf_token, &ttl.as_secs_f64()],
                )
                .await?;
                tx.commit().await?;
                Ok(Some(name))
            })
            .await
    }

    /// The live session with this secret, of an operator not revoked.
    pub async fn session(
        &self,
        secret: &ConsoleSecretHash,
    ) -> Result<Option<OperatorSession>, StoreError> {
        self.0
            .with_auth_client(|client| async move {
                let stmt = client
                    .prepare_cached(
                        "SELECT o.id, o.name, s.csrf_token, s.expires_at FROM operator_sessions s \
                         JOIN operators o ON o.id = s.operator_id \
                         WHERE s.secret_hash = $1 AND s.expires_at > now() AND o.revoked_at IS NULL",
                    )
                    .await?;
                Ok(client
                    .query_opt(&stmt, &[&secret.0.as_slice()])
                    .await?
                    .map(|r| OperatorSession {
                        operator_id: r.get(0),
                        operator_name: r.get(1),
                        csrf_token: r.get(2),
                        expires_at: r.get(3),
                    }))
            })
            .await
    }

    /// Ends a session.
    pub async fn sign_out(&self, secret: &ConsoleSecretHash) -> Result<(), StoreError> {
        self.0
            .with_client(|client| async move {
                client
                    .execute(
                        "DELETE FROM operator_sessions WHERE secret_hash = $1",
                        &[&secret.0.as_slice()],
                    )
                    .await?;
                Ok(())
            })
            .await
    }

    /// A page of transfers, newest first, older than `before`. The client
    /// and the time range narrow an index scan; status and provider
    /// reference filter at most `scan_max` of the transfers it yields.
    pub async fn transfers(
        &self,
        filter: &TransferFilter,
        before: Option<Uuid>,
        page: i64,
        scan_max: i64,
    ) -> Result<TransferLines, StoreError> {
        assert!(page > 0 && scan_max >= page, "a page fits in its scan");
        let scan = Scan::of(filter, before, scan_max);
        let status = filter.status.map(TransferStatus::as_str);
        let reference = filter.provider_reference.clone();
        self.0
            .with_client(|client| async move {
                let n = scan.params.len();
                let sql = format!(
                    "WITH scan AS ({})
                     SELECT * FROM scan
                     WHERE (${}::text IS NULL OR status = ${})
                       AND (${}::text IS NULL OR provider_reference = ${})
                     ORDER BY {} LIMIT ${}",
                    scan.sql(LINE_COLUMNS),
                    n + 1,
                    n + 1,
                    n + 2,
                    n + 2,
                    scan.order,
                    n + 3
                );
                let fetch = page + 1;
                let mut params = scan.params();
                params.extend([&status as &(dyn ToSql + Sync), &reference, &fetch]);
                let rows = client.query(&sql, &params).await?;
                let mut lines: Vec<TransferLine> = rows.iter().map(line_of).collect();
                let full = lines.len() as i64 > page;
                lines.truncate(page as usize);
                let (next, scan_exhausted) = if full {
                    (lines.last().map(|l| l.id), None)
                } else {
                    // Not a full page: either every transfer in range was
                    // read, or the scan stopped at its bound; then resume
                    // after the last transfer it read.
                    let sql = format!(
                        "SELECT count(*), (array_agg(id ORDER BY {}))[count(*)] FROM ({}) s",
                        scan.order,
                        scan.sql("id, created_at")
                    );
                    let row = client.query_one(&sql, &scan.params()).await?;
                    let scanned: i64 = row.get(0);
                    if scanned == scan_max {
                        (row.get(1), Some(scan_max))
                    } else {
                        (None, None)
                    }
                };
                Ok(TransferLines {
                    lines,
                    next,
                    scan_exhausted,
                })
            })
            .await
    }

    /// The transfers an idempotency key names: of one client, or of every
    /// client (one primary-key lookup per client). Keys are kept for
    /// their retention only; older transfers are found by id or time.
    pub async fn transfers_by_key(
        &self,
        key: &str,
        client_id: Option<Uuid>,
        limit: i64,
    ) -> Result<Vec<TransferLine>, StoreError> {
        let key = key.to_owned();
        self.0
            .with_client(|client| async move {
                let rows = client
                    .query(
                        "SELECT t.id, t.client_id, t.idempotency_key, t.status, t.amount, t.currency,
                                t.provider_reference, t.created_at
                         FROM clients c
                         CROSS JOIN LATERAL (SELECT transfer_id FROM idempotency_keys k
                                             WHERE k.client_id = c.id AND k.key = $1) k
                         JOIN transfers t ON t.id = k.transfer_id
                         WHERE ($2::uuid IS NULL OR c.id = $2)
                         ORDER BY t.id DESC LIMIT $3",
                        &[&key, &client_id, &limit],
                    )
                    .await?;
                Ok(rows.iter().map(line_of).collect())
            })
            .await
    }

    /// One transfer's whole story; `None` when no transfer has this id.
    pub async fn timeline(&self, id: Uuid) -> Result<Option<Timeline>, StoreError> {
        let Some(transfer) = self.0.transfer_by_id(id).await? else {
            return Ok(None);
        };
        let client_id = transfer.client_id.0;
        let key = transfer.idempotency_key.as_str().to_owned();
        let target = id.to_string();
        self.0
            .with_client(|client| async move {
                let by_key: [&(dyn ToSql + Sync); 2] = [&client_id, &key];
                let by_id: [&(dyn ToSql + Sync); 1] = [&id];
                let by_target: [&(dyn ToSql + Sync); 1] = [&target];
                let (key_row, attempts, outbox, poll, notifications, audit) = futures::try_join!(
                    client.query_opt(
                        "SELECT created_at, expires_at, response_status FROM idempotency_keys \
                         WHERE client_id = $1 AND key = $2",
                        &by_key,
                    ),
                    client.query(
                        "SELECT attempt, outcome, detail, at FROM provider_attempts \
                         WHERE transfer_id = $1 ORDER BY attempt",
                        &by_id,
                    ),
                    client.query_opt(
                        "SELECT attempts, available_at, last_error, dead_at, ambiguous FROM outbox \
                         WHERE transfer_id = $1",
                        &by_id,
                    ),
                    client.query_opt(
                        "SELECT attempts, processing_since, next_poll_at, last_error FROM provider_polls \
                         WHERE transfer_id = $1",
                        &by_id,
                    ),
                    client.query(
                        "SELECT id, reported, received_at FROM provider_notifications \
                         WHERE transfer_id = $1 ORDER BY received_at, id",
                        &by_id,
                    ),
                    client.query(
                        "SELECT id, operator_name, action, target, rows_touched, at FROM operator_audit \
                         WHERE target = $1 ORDER BY id",
                        &by_target,
                    ),
                )?;
                let (mut events, events_complete) = transfer_events(&client, &transfer).await?;
                attach_deliveries(&client, &mut events).await?;
                let mut attempts: Vec<AttemptRecord> = attempts
                    .iter()
                    .map(|r| AttemptRecord {
                        attempt: r.get(0),
                        outcome: r.get(1),
                        detail: r.get(2),
                        at: r.get(3),
                    })
                    .collect();
                if let Some(first) = first_call(&transfer, &attempts, &events) {
                    attempts.insert(0, first);
                }
                Ok(Some(Timeline {
                    transfer,
                    key: key_row.map(|r| KeyRecord {
                        created_at: r.get(0),
                        expires_at: r.get(1),
                        response_status: r.get(2),
                    }),
                    attempts,
                    outbox: outbox.map(|r| OutboxRecord {
                        attempts: r.get(0),
                        available_at: r.get(1),
                        last_error: r.get(2),
                        dead_at: r.get(3),
                        ambiguous: r.get(4),
                    }),
                    poll: poll.map(|r| PollRecord {
                        attempts: r.get(0),
                        processing_since: r.get(1),
                        next_poll_at: r.get(2),
                        last_error: r.get(3),
                    }),
                    notifications: notifications
                        .iter()
                        .map(|r| NotificationRecord {
                            id: r.get(0),
                            reported: r.get(1),
                            received_at: r.get(2),
                        })
                        .collect(),
                    events,
                    events_complete,
                    audit: audit.iter().map(audit_of).collect(),
                }))
            })
            .await
    }

    /// Dead outbox rows whose last error contains `error` (all when
    /// `None`), most recently dead first, and how many match in all.
    pub async fn dead_rows(
        &self,
        error: Option<&str>,
        limit: i64,
    ) -> Result<(Vec<DeadRow>, i64), StoreError> {
        let error = error.map(str::to_owned);
        self.0
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

    /// Puts dead outbox rows back in line with a fresh budget: one
    /// transfer's, or every one whose last error contains `error` (all
    /// when both are `None`), at most `rows_max`. Audited in the same
    /// transaction; returns how many rows are due again. The fencing token
    /// keeps growing: a retry starts a new budget from where it stands.
    pub async fn retry_dead(
        &self,
        operator: &OperatorSession,
        transfer_id: Option<Uuid>,
        error: Option<&str>,
        rows_max: i64,
    ) -> Result<u64, StoreError> {
        let error = error.map(str::to_owned);
        let target = match (transfer_id, &error) {
            (Some(id), _) => id.to_string(),
            (None, Some(e)) => format!("dead rows with last error containing {e:?}"),
            (None, None) => "all dead rows".to_owned(),
        };
        let operator = operator.clone();
        self.0
            .with_client(|mut client| async move {
                let tx = client.transaction().await?;
                let n = super::outbox::requeue_dead(&tx, transfer_id, error.as_deref(), rows_max)
                    .await?;
                audit(&tx, &operator, "outbox.retry", &target, n).await?;
                tx.commit().await?;
                Ok(n)
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
        self.0
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

    /// Makes an event's undelivered deliveries to live endpoints due now
    /// with a fresh schedule, audited; `None` when no event has this id.
    pub async fn redeliver_event(
        &self,
        operator: &OperatorSession,
        event_id: Uuid,
    ) -> Result<Option<u64>, StoreError> {
        let operator = operator.clone();
        self.0
            .with_client(|mut client| async move {
                let tx = client.transaction().await?;
                let Some(n) = requeue_deliveries(&tx, None, event_id).await? else {
                    return Ok(None);
                };
                audit(&tx, &operator, "event.redeliver", &event_id.to_string(), n).await?;
                tx.commit().await?;
                Ok(Some(n))
            })
            .await
    }

    /// Endpoints that need an operator: disabled ones, and live ones with
    /// dead deliveries.
    pub async fn endpoints(&self, limit: i64) -> Result<Vec<EndpointLine>, StoreError> {
        self.0
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
        self.0
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

    /// Re-enables an endpoint (if disabled) and makes its dead deliveries
    /// due again with a fresh schedule, at most `rows_max`, audited;
    /// `None` when no live endpoint has this id.
    pub async fn revive_endpoint(
        &self,
        operator: &OperatorSession,
        endpoint_id: Uuid,
        rows_max: i64,
    ) -> Result<Option<u64>, StoreError> {
        let operator = operator.clone();
        let set = DELIVERIES.requeue_set();
        self.0
            .with_client(|mut client| async move {
                let tx = client.transaction().await?;
                let found = tx
                    .query_opt(
                        "UPDATE webhook_endpoints SET disabled_at = NULL \
                         WHERE id = $1 AND deleted_at IS NULL RETURNING id",
                        &[&endpoint_id],
                    )
                    .await?;
                if found.is_none() {
                    return Ok(None);
                }
                let n = tx
                    .execute(
                        &format!(
                            "UPDATE webhook_deliveries q SET {set} WHERE (event_id, endpoint_id) IN (
                                SELECT event_id, endpoint_id FROM webhook_deliveries
                                WHERE endpoint_id = $1 AND dead_at IS NOT NULL AND delivered_at IS NULL
                                ORDER BY event_id LIMIT $2 FOR UPDATE)"
                        ),
                        &[&endpoint_id, &rows_max],
                    )
                    .await?;
                assert!(n <= rows_max as u64, "a bulk redelivery stays within its limit");
                audit(&tx, &operator, "endpoint.redeliver-dead", &endpoint_id.to_string(), n)
                    .await?;
                if n > 0 {
                    tx.execute("SELECT pg_notify($1, '')", &[&WEBHOOK_CHANNEL])
                        .await?;
                }
                tx.commit().await?;
                Ok(Some(n))
            })
            .await
    }

    /// A page of the audit, newest first, older than `before`.
    pub async fn audit(
        &self,
        before: Option<i64>,
        page: i64,
    ) -> Result<(Vec<AuditLine>, Option<i64>), StoreError> {
        self.0
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
        self.0
            .with_client(|client| async move {
                let row = client
                    .query_one(
                        "SELECT
                            (SELECT count(*) FROM transfers WHERE id >= $1),
                            (SELECT count(*) FROM webhook_events WHERE id >= $1
                                AND type IN ('transfer.succeeded', 'transfer.failed')),
                            (SELECT count(*) FILTER (WHERE dead_at IS NULL) FROM outbox),
                            (SELECT count(*) FROM outbox WHERE dead_at IS NOT NULL),
                            (SELECT count(*) FROM webhook_deliveries
                                WHERE delivered_at IS NULL AND dead_at IS NULL),
                            (SELECT count(*) FROM webhook_deliveries WHERE dead_at IS NOT NULL),
                            (SELECT count(*) FROM provider_polls)",
                        &[&since],
                    )
                    .await?;
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

/// A transfer's events, oldest first, and whether all its status changes'
/// events were found (the transfer counts its changes; events are deleted
/// after `--event-retention`).
async fn transfer_events(
    client: &deadpool_postgres::Object,
    transfer: &Transfer,
) -> Result<(Vec<EventLine>, bool), StoreError> {
    let stmt = client
        .prepare_cached(
            "SELECT id, client_id, transfer_id, type, created_at FROM webhook_events \
             WHERE transfer_id = $1 ORDER BY id",
        )
        .await?;
    let events: Vec<EventLine> = client
        .query(&stmt, &[&transfer.id])
        .await?
        .iter()
        .map(event_of)
        .collect();
    let complete = events.len() as i64 >= i64::from(transfer.status_sequence);
    Ok((events, complete))
}

/// The first call of a transfer when it answered the final outcome, which
/// the relay does not record (`store::outbox`): told by the status change
/// it made, the transfer's first.
fn first_call(
    transfer: &Transfer,
    attempts: &[AttemptRecord],
    events: &[EventLine],
) -> Option<AttemptRecord> {
    if attempts.iter().any(|a| a.attempt == 1) {
        return None;
    }
    // Any other first change (`processing`, or a report that came before
    // the call's answer was written) leaves attempt 1 recorded.
    let first = events.first()?;
    let outcome = match first.kind.as_str() {
        "transfer.succeeded" => "succeeded",
        "transfer.failed" => "declined",
        _ => return None,
    };
    Some(AttemptRecord {
        attempt: 1,
        outcome: outcome.to_owned(),
        detail: match outcome {
            "declined" => transfer.failure_reason.clone(),
            _ => transfer.provider_reference.clone(),
        },
        at: first.created_at,
    })
}

/// The columns of a transfers page.
const LINE_COLUMNS: &str =
    "id, client_id, idempotency_key, status, amount, currency, provider_reference, created_at";

/// The bounded index scan under a transfers page: only the conditions a
/// filter has, so each is an index condition (a generic `$1 IS NULL OR
/// ...` is not, and made a page on a million rows read most of them).
struct Scan {
    /// `WHERE` conditions on `$1..`.
    conditions: Vec<String>,
    params: Vec<Box<dyn ToSql + Sync + Send>>,
    /// The order the index gives.
    order: &'static str,
}

impl Scan {
    fn of(filter: &TransferFilter, before: Option<Uuid>, scan_max: i64) -> Self {
        let mut scan = Self {
            conditions: Vec::new(),
            params: Vec::new(),
            order: "id DESC",
        };
        match filter.client_id {
            // A client's transfers in the order of their index (the one
            // the API's list uses): by creation time, then id.
            Some(client_id) => {
                scan.order = "created_at DESC, id DESC";
                scan.push("client_id = $", client_id);
                if let Some(b) = before {
                    scan.push(
                        "(created_at, id) < (SELECT created_at, id FROM transfers WHERE id = $)",
                        b,
                    );
                }
                if let Some(to) = filter.to {
                    scan.push("created_at < $", to);
                }
                if let Some(from) = filter.from {
                    scan.push("created_at >= $", from);
                }
            }
            // Across clients: transfer ids are UUID v7, in creation order
            // to the millisecond, so the primary key serves time order and
            // a time range is a range of ids.
            None => {
                let to = filter.to.map(|t| event_id_floor(t.into()));
                if let Some(upper) = before.into_iter().chain(to).min() {
                    scan.push("id < $", upper);
                }
                if let Some(from) = filter.from {
                    scan.push("id >= $", event_id_floor(from.into()));
                }
            }
        }
        scan.params.push(Box::new(scan_max));
        scan
    }

    /// Adds a condition whose `$` is the next parameter.
    fn push<T: ToSql + Sync + Send + 'static>(&mut self, condition: &str, value: T) {
        self.params.push(Box::new(value));
        self.conditions
            .push(condition.replace('$', &format!("${}", self.params.len())));
    }

    /// The scan's `SELECT` of `columns`, at most `scan_max` rows.
    fn sql(&self, columns: &str) -> String {
        let filter = if self.conditions.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", self.conditions.join(" AND "))
        };
        format!(
            "SELECT {columns} FROM transfers {filter} ORDER BY {} LIMIT ${}",
            self.order,
            self.params.len()
        )
    }

    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.params
            .iter()
            .map(|p| p.as_ref() as &(dyn ToSql + Sync))
            .collect()
    }
}

/// Writes one operator action to the audit, in the action's transaction.
async fn audit(
    tx: &deadpool_postgres::Transaction<'_>,
    operator: &OperatorSession,
    action: &str,
    target: &str,
    rows: u64,
) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO operator_audit (operator_id, operator_name, action, target, rows_touched) \
         VALUES ($1, $2, $3, $4, $5)",
        &[
            &operator.operator_id,
            &operator.operator_name,
            &action,
            &target,
            &(rows as i64),
        ],
    )
    .await?;
    Ok(())
}

/// Fills in each event's deliveries (one query for the page).
async fn attach_deliveries(
    client: &deadpool_postgres::Object,
    events: &mut [EventLine],
) -> Result<(), StoreError> {
    let ids: Vec<Uuid> = events.iter().map(|e| e.id).collect();
    for (event_id, delivery) in deliveries_of(client, &ids).await? {
        if let Some(event) = events.iter_mut().find(|e| e.id == event_id) {
            event.deliveries.push(delivery);
        }
    }
    Ok(())
}

fn line_of(r: &tokio_postgres::Row) -> TransferLine {
    TransferLine {
        id: r.get("id"),
        client_id: r.get("client_id"),
        idempotency_key: r.get("idempotency_key"),
        status: r.get("status"),
        amount: r.get("amount"),
        currency: r.get("currency"),
        provider_reference: r.get("provider_reference"),
        created_at: r.get("created_at"),
    }
}

fn endpoint_of(r: &tokio_postgres::Row) -> EndpointLine {
    EndpointLine {
        id: r.get(0),
        client_id: r.get(1),
        url: r.get(2),
        disabled_at: r.get(3),
        dead: r.get(4),
    }
}

fn event_of(r: &tokio_postgres::Row) -> EventLine {
    EventLine {
        id: r.get(0),
        client_id: r.get(1),
        transfer_id: r.get(2),
        kind: r.get(3),
        created_at: r.get(4),
        deliveries: Vec::new(),
    }
}

fn audit_of(r: &tokio_postgres::Row) -> AuditLine {
    AuditLine {
        id: r.get(0),
        operator_name: r.get(1),
        action: r.get(2),
        target: r.get(3),
        rows_touched: r.get(4),
        at: r.get(5),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scan_has_only_the_conditions_its_filter_has_numbered_in_order() {
        let all = Scan::of(&TransferFilter::default(), None, 20_000);
        assert_eq!(
            all.sql("id"),
            "SELECT id FROM transfers  ORDER BY id DESC LIMIT $1"
        );
        let cursor = Uuid::now_v7();
        let client = Uuid::now_v7();
        let mine = Scan::of(
            &TransferFilter {
                client_id: Some(client),
                from: Some(Utc::now()),
                ..TransferFilter::default()
            },
            Some(cursor),
            50,
        );
        assert_eq!(
            mine.sql("id"),
            "SELECT id FROM transfers WHERE client_id = $1 AND (created_at, id) < \
             (SELECT created_at, id FROM transfers WHERE id = $2) AND created_at >= $3 \
             ORDER BY created_at DESC, id DESC LIMIT $4"
        );
        assert_eq!(mine.params.len(), 4);
    }

    #[test]
    fn across_clients_a_time_range_is_a_range_of_ids_under_the_cursor() {
        let to = Utc::now();
        let older = event_id_floor((to - chrono::Duration::hours(1)).into());
        // The cursor is older than the range's end: it is the bound.
        let scan = Scan::of(
            &TransferFilter {
                to: Some(to),
                from: Some(to - chrono::Duration::days(1)),
                ..TransferFilter::default()
            },
            Some(older),
            50,
        );
        assert_eq!(
            scan.sql("id"),
            "SELECT id FROM transfers WHERE id < $1 AND id >= $2 ORDER BY id DESC LIMIT $3"
        );
        assert_eq!(format!("{:?}", scan.params[0]), format!("{older:?}"));
    }
}
