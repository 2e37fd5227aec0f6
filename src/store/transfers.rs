use std::collections::BTreeMap;

use uuid::Uuid;

use super::{Db, Store, StoreError};
use crate::domain::{
    AccountId, Amount, Anomaly, ClientId, Currency, Description, IdempotencyKey, Metadata,
    NewTransfer, Transfer, TransferStatus,
};

const COLUMNS: &str = "id, client_id, idempotency_key, status, amount, currency, source_account, \
    destination_account, description, metadata, created_at, updated_at, provider_reference, failure_reason, \
    status_sequence, return_reason, returned_at";

/// A transfer's anomalies as one JSON array, oldest first (a column of the
/// read by id; an index lookup on a small table).
const ANOMALIES: &str = "(SELECT COALESCE(jsonb_agg(jsonb_build_object(\
    'status_then', a.status_then, 'reported', a.reported, 'reference', a.reference, 'reason', a.reason, \
    'source', a.source, 'reported_at', to_char(a.reported_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')) \
    ORDER BY a.id), '[]') FROM transfer_anomalies a WHERE a.transfer_id = transfers.id) AS anomalies";

/// One page of a client's transfers, newest first.
#[derive(Debug)]
pub struct TransferPage {
    /// At most the requested number of transfers.
    pub transfers: Vec<Transfer>,
    /// True when older transfers follow the last one.
    pub has_more: bool,
}

impl Store {
    /// A client's transfer by id; another client's id reads as absent.
    pub async fn transfer(
        &self,
        client_id: ClientId,
        id: Uuid,
    ) -> Result<Option<Transfer>, StoreError> {
        transfer_by_id(&self.pool, id, Some(client_id)).await
    }

    /// A page of a client's transfers, newest first, after the cursor
    /// `starting_after` (exclusive). `None` when the cursor names no transfer
    /// of this client.
    pub async fn transfers_page(
        &self,
        client_id: ClientId,
        limit: i64,
        starting_after: Option<Uuid>,
    ) -> Result<Option<TransferPage>, StoreError> {
        self.with_client(|client| async move {
            // One more than asked tells whether another page follows.
            let fetch = limit + 1;
            let rows = match starting_after {
                None => {
                    let stmt = client
                        .prepare_cached(&format!(
                            "SELECT {COLUMNS} FROM transfers WHERE client_id = $1 \
                             ORDER BY created_at DESC, id DESC LIMIT $2"
                        ))
                        .await?;
                    client.query(&stmt, &[&client_id.0, &fetch]).await?
                }
                Some(cursor) => {
                    let exists = client
                        .prepare_cached("SELECT 1 FROM transfers WHERE id = $1 AND client_id = $2")
                        .await?;
                    if client.query_opt(&exists, &[&cursor, &client_id.0]).await?.is_none() {
                        return Ok(None);
                    }
                    let stmt = client
                        .prepare_cached(&format!(
                            "SELECT {COLUMNS} FROM transfers WHERE client_id = $1 \
                             AND (created_at, id) < (SELECT created_at, id FROM transfers WHERE id = $3) \
                             ORDER BY created_at DESC, id DESC LIMIT $2"
                        ))
                        .await?;
                    client.query(&stmt, &[&client_id.0, &fetch, &cursor]).await?
                }
            };
            let mut transfers = rows.iter().map(transfer_from_row).collect::<Result<Vec<_>, _>>()?;
            let has_more = transfers.len() as i64 > limit;
            transfers.truncate(limit as usize);
            Ok(Some(TransferPage { transfers, has_more }))
        })
        .await
    }
}

fn corrupt(what: &'static str) -> impl Fn(String) -> StoreError {
    move |e| StoreError::Corrupt(format!("{what}: {e}"))
}

/// Rebuilds a transfer from its row. Only valid transfers are ever written,
/// so a value that fails to parse is corruption, not a client error.
pub(super) fn transfer_from_row(row: &tokio_postgres::Row) -> Result<Transfer, StoreError> {
    let status: String = row.get("status");
    let description: Option<String> = row.get("description");
    let metadata: serde_json::Value = row.get("metadata");
    let metadata: BTreeMap<String, String> = serde_json::from_value(metadata)
        .map_err(|e| StoreError::Corrupt(format!("metadata: {e}")))?;
    let request = NewTransfer {
        amount: Amount::parse(row.get("amount")).map_err(corrupt("amount"))?,
        currency: Currency::parse(row.get("currency")).map_err(corrupt("currency"))?,
        source_account: AccountId::parse(row.get("source_account"))
            .map_err(corrupt("source_account"))?,
        destination_account: AccountId::parse(row.get("destination_account"))
            .map_err(corrupt("destination_account"))?,
        description: description
            .as_deref()
            .map(Description::parse)
            .transpose()
            .map_err(corrupt("description"))?,
        metadata: Metadata::from_trusted(metadata),
    };
    Ok(Transfer {
        id: row.get("id"),
        client_id: ClientId(row.get("client_id")),
        idempotency_key: IdempotencyKey::from_trusted(row.get("idempotency_key")),
        status: TransferStatus::parse(&status)
            .ok_or_else(|| StoreError::Corrupt(format!("status {status}")))?,
        request,
        created_at: row.get("created_at"),
        updated_at: row.get("updated_at"),
        provider_reference: row.get("provider_reference"),
        failure_reason: row.get("failure_reason"),
        status_sequence: row.get("status_sequence"),
        return_reason: row.get("return_reason"),
        returned_at: row.get("returned_at"),
        anomalies: anomalies_of(row)?,
    })
}

/// The `anomalies` column where the read has one, else none.
fn anomalies_of(row: &tokio_postgres::Row) -> Result<Vec<Anomaly>, StoreError> {
    if !row.columns().iter().any(|c| c.name() == "anomalies") {
        return Ok(Vec::new());
    }
    #[derive(serde::Deserialize)]
    struct Stored {
        status_then: String,
        reported: String,
        reference: Option<String>,
        reason: Option<String>,
        source: String,
        reported_at: String,
    }
    let raw: serde_json::Value = row.get("anomalies");
    let stored: Vec<Stored> = serde_json::from_value(raw).map_err(corrupt_json("anomalies"))?;
    stored
        .into_iter()
        .map(|a| {
            Ok(Anomaly {
                status_then: TransferStatus::parse(&a.status_then).ok_or_else(|| {
                    StoreError::Corrupt(format!("anomaly status {}", a.status_then))
                })?,
                reported: a.reported,
                reference: a.reference,
                reason: a.reason,
                source: a.source,
                reported_at: a.reported_at,
            })
        })
        .collect()
}

fn corrupt_json(what: &'static str) -> impl Fn(serde_json::Error) -> StoreError {
    move |e| StoreError::Corrupt(format!("{what}: {e}"))
}

/// A transfer by id: `client`'s only (another client's id reads as
/// absent), or whoever's with `None` (the operator console).
pub(super) async fn transfer_by_id(
    db: &Db,
    id: Uuid,
    client: Option<ClientId>,
) -> Result<Option<Transfer>, StoreError> {
    let client = client.map(|c| c.0);
    db.with_client(|conn| async move {
        let stmt = conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS}, {ANOMALIES} FROM transfers \
                 WHERE id = $1 AND ($2::uuid IS NULL OR client_id = $2)"
            ))
            .await?;
        conn.query_opt(&stmt, &[&id, &client])
            .await?
            .as_ref()
            .map(transfer_from_row)
            .transpose()
    })
    .await
}
