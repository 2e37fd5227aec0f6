//! The transfers pages (a bounded scan, keyset pages) and one transfer's
//! timeline.

use tokio_postgres::types::ToSql;
use uuid::Uuid;

use tokio_postgres::Row;

use super::{
    attach_deliveries, audit_of, event_of, AttemptRecord, ConsoleStore, EventLine, KeyRecord,
    NotificationRecord, OutboxRecord, PollRecord, Timeline, TransferFilter, TransferLine,
    TransferLines,
};
use crate::domain::webhook::event_id_floor;
use crate::domain::{Transfer, TransferStatus};
use crate::store::transfers::transfer_by_id;
use crate::store::StoreError;

impl ConsoleStore {
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
        self.write
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
        self.write
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
        let Some(transfer) = transfer_by_id(&self.write, id, None).await? else {
            return Ok(None);
        };
        let client_id = transfer.client_id.0;
        let key = transfer.idempotency_key.as_str().to_owned();
        let target = id.to_string();
        self.write
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
                let mut attempts: Vec<AttemptRecord> = attempts.iter().map(attempt_of).collect();
                if let Some(first) = first_call(&transfer, &attempts, &events) {
                    attempts.insert(0, first);
                }
                Ok(Some(Timeline {
                    transfer,
                    key: key_row.as_ref().map(key_of),
                    attempts,
                    outbox: outbox.as_ref().map(outbox_of),
                    poll: poll.as_ref().map(poll_of),
                    notifications: notifications.iter().map(notification_of).collect(),
                    events,
                    events_complete,
                    audit: audit.iter().map(audit_of).collect(),
                }))
            })
            .await
    }
}

// The timeline's rows, each read in the order its statement selects.

fn key_of(r: &Row) -> KeyRecord {
    KeyRecord {
        created_at: r.get(0),
        expires_at: r.get(1),
        response_status: r.get(2),
    }
}

fn attempt_of(r: &Row) -> AttemptRecord {
    AttemptRecord {
        attempt: r.get(0),
        outcome: r.get(1),
        detail: r.get(2),
        at: r.get(3),
    }
}

fn outbox_of(r: &Row) -> OutboxRecord {
    OutboxRecord {
        attempts: r.get(0),
        available_at: r.get(1),
        last_error: r.get(2),
        dead_at: r.get(3),
        ambiguous: r.get(4),
    }
}

fn poll_of(r: &Row) -> PollRecord {
    PollRecord {
        attempts: r.get(0),
        processing_since: r.get(1),
        next_poll_at: r.get(2),
        last_error: r.get(3),
    }
}

fn notification_of(r: &Row) -> NotificationRecord {
    NotificationRecord {
        id: r.get(0),
        reported: r.get(1),
        received_at: r.get(2),
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

#[cfg(test)]
mod tests {
    use chrono::Utc;

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
