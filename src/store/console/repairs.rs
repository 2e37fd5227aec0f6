//! The repairs: each made with its queue's own requeue, and audited in the
//! same transaction.

use uuid::Uuid;

use super::{ConsoleStore, OperatorSession};
use crate::store::webhooks::{requeue_deliveries, revive_endpoint};
use crate::store::StoreError;

impl ConsoleStore {
    /// Puts dead outbox rows back in line with a fresh budget: one
    /// transfer's, or every one whose last error contains `error` (all
    /// when both are `None`), at most `rows_max`. Audited in the same
    /// transaction: a bulk retry as such, and each transfer it retried, so
    /// that the transfer's timeline shows it. Returns how many rows are due
    /// again. The fencing token keeps growing: a retry starts a new budget
    /// from where it stands. The rows fall due `rows_per_second` at a time.
    pub async fn retry_dead(
        &self,
        operator: &OperatorSession,
        transfer_id: Option<Uuid>,
        error: Option<&str>,
        rows_max: i64,
        rows_per_second: u32,
    ) -> Result<u64, StoreError> {
        let error = error.map(str::to_owned);
        let target = match (transfer_id, &error) {
            (Some(id), _) => id.to_string(),
            (None, Some(e)) => format!("dead rows with last error containing {e:?}"),
            (None, None) => "all dead rows".to_owned(),
        };
        let operator = operator.clone();
        self.write
            .with_client(|mut client| async move {
                let tx = client.transaction().await?;
                let requeued = crate::store::outbox::requeue_dead(
                    &tx,
                    transfer_id,
                    error.as_deref(),
                    rows_max,
                    rows_per_second,
                )
                .await?;
                let n = requeued.len() as u64;
                if transfer_id.is_none() {
                    audit(&tx, &operator, "outbox.retry-bulk", &target, n).await?;
                    let each: Vec<String> = requeued.iter().map(Uuid::to_string).collect();
                    audit_each(&tx, &operator, "outbox.retry", &each).await?;
                } else {
                    audit(&tx, &operator, "outbox.retry", &target, n).await?;
                }
                tx.commit().await?;
                Ok(n)
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
        self.write
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
        self.write
            .with_client(|mut client| async move {
                let tx = client.transaction().await?;
                let Some((was_disabled, n)) = revive_endpoint(&tx, endpoint_id, rows_max).await?
                else {
                    return Ok(None);
                };
                let target = endpoint_id.to_string();
                if was_disabled {
                    audit(&tx, &operator, "endpoint.enable", &target, 1).await?;
                }
                audit(
                    &tx,
                    &operator,
                    "endpoint.redeliver-dead",
                    &endpoint_id.to_string(),
                    n,
                )
                .await?;
                tx.commit().await?;
                Ok(Some(n))
            })
            .await
    }
}

/// Writes one row per target of one operator action (each touching one
/// row), in the action's transaction.
async fn audit_each(
    tx: &deadpool_postgres::Transaction<'_>,
    operator: &OperatorSession,
    action: &str,
    targets: &[String],
) -> Result<(), StoreError> {
    if targets.is_empty() {
        return Ok(());
    }
    let n = tx
        .execute(
            "INSERT INTO operator_audit (operator_id, operator_name, action, target, rows_touched) \
             SELECT $1, $2, $3, t, 1 FROM UNNEST($4::text[]) AS t",
            &[
                &operator.operator_id,
                &operator.operator_name,
                &action,
                &targets,
            ],
        )
        .await?;
    assert_eq!(n, targets.len() as u64, "one audit row per target");
    Ok(())
}

/// Writes one operator action to the audit, in the action's transaction.
async fn audit(
    tx: &deadpool_postgres::Transaction<'_>,
    operator: &OperatorSession,
    action: &str,
    target: &str,
    rows: u64,
) -> Result<(), StoreError> {
    audit_as(
        tx,
        Some(operator.operator_id),
        &operator.operator_name,
        action,
        target,
        rows,
    )
    .await
}

/// Writes one action to the audit, in the action's transaction: an
/// operator's (`operator_id` set), or a command line's (`None`, and a name
/// starting with `cli:`, which the table checks).
pub(in crate::store) async fn audit_as(
    tx: &deadpool_postgres::Transaction<'_>,
    operator_id: Option<Uuid>,
    operator_name: &str,
    action: &str,
    target: &str,
    rows: u64,
) -> Result<(), StoreError> {
    assert!(
        operator_id.is_some() || operator_name.starts_with("cli:"),
        "an action without an operator comes from the command line"
    );
    tx.execute(
        "INSERT INTO operator_audit (operator_id, operator_name, action, target, rows_touched) \
         VALUES ($1, $2, $3, $4, $5)",
        &[
            &operator_id,
            &operator_name,
            &action,
            &target,
            &(rows as i64),
        ],
    )
    .await?;
    Ok(())
}
