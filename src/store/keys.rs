use std::collections::{HashMap, HashSet};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{Store, StoreError};
use crate::domain::{ClientId, Fingerprint, IdempotencyKey, Transfer};

/// The first answer given for a key, kept byte for byte so replays are identical.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredAnswer {
    /// Fingerprint of the request that produced it.
    pub fingerprint: Fingerprint,
    /// HTTP status of the first answer.
    pub status: u16,
    /// Exact body of the first answer.
    pub body: Bytes,
    /// The transfer it names.
    pub transfer_id: Uuid,
    /// When the key stops being remembered.
    pub expires_at: DateTime<Utc>,
}

impl StoredAnswer {
    /// True once the key's retention ran out: it then names nothing.
    pub fn is_expired(&self, now: DateTime<Utc>) -> bool {
        self.expires_at <= now
    }
}

/// One new key to write: the transfer it creates and the answer to store.
#[derive(Debug, Clone)]
pub struct KeyWrite {
    /// The new transfer (its id is `answer.transfer_id`).
    pub transfer: Transfer,
    /// The answer this attempt will give if it wins the key.
    pub answer: StoredAnswer,
}

/// What a flush did with one [`KeyWrite`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The key was new (or expired): the transfer, key row and outbox row were written.
    Inserted,
    /// The key already names a live answer, written earlier or by another process.
    Existing(StoredAnswer),
    /// The key row vanished between the conflict and the read-back (the reaper
    /// deleted it); nothing was written and a retry will insert it.
    Vanished,
}

/// One statement writes the whole batch: key rows (an expired row is replaced,
/// a live one is left alone), then the transfers and outbox rows of the keys
/// that were won, then a notification for the relay. Data-modifying CTEs all
/// run, and foreign keys are checked at the end of the statement.
const INSERT_BATCH: &str = "
WITH input AS (
    SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::text[], $4::bytea[], $5::int4[], $6::bytea[],
                         $7::timestamptz[], $8::timestamptz[], $9::int8[], $10::text[], $11::text[],
                         $12::text[], $13::text[], $14::jsonb[])
        AS i(transfer_id, client_id, key, fingerprint, response_status, response_body,
             created_at, expires_at, amount, currency, source_account,
             destination_account, description, metadata)
), won AS (
    INSERT INTO idempotency_keys AS k
        (client_id, key, fingerprint, transfer_id, response_status, response_body, created_at, expires_at)
    SELECT client_id, key, fingerprint, transfer_id, response_status, response_body, created_at, expires_at
    FROM input
    ON CONFLICT (client_id, key) DO UPDATE SET
        fingerprint = EXCLUDED.fingerprint, transfer_id = EXCLUDED.transfer_id,
        response_status = EXCLUDED.response_status, response_body = EXCLUDED.response_body,
        created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
    WHERE k.expires_at <= EXCLUDED.created_at
    RETURNING transfer_id
), new_transfers AS (
    INSERT INTO transfers (id, client_id, idempotency_key, status, amount, currency, source_account,
                           destination_account, description, metadata, created_at, updated_at)
    SELECT transfer_id, client_id, key, 'pending', amount, currency, source_account,
           destination_account, description, metadata, created_at, created_at
    FROM input WHERE transfer_id IN (SELECT transfer_id FROM won)
    RETURNING id
), new_outbox AS (
    INSERT INTO outbox (transfer_id) SELECT id FROM new_transfers RETURNING transfer_id
)
SELECT transfer_id, pg_notify('payrail_outbox', '') FROM new_outbox";

/// Reads back the live rows that beat this batch's attempts. A separate
/// statement, so that under READ COMMITTED it sees rows that another process
/// committed while our insert waited on them.
const SELECT_EXISTING: &str = "
SELECT k.client_id, k.key, k.fingerprint, k.transfer_id, k.response_status, k.response_body, k.expires_at
FROM idempotency_keys k
JOIN UNNEST($1::uuid[], $2::text[]) AS i(client_id, key) USING (client_id, key)";

/// Deletes one bounded batch of expired key rows.
const DELETE_EXPIRED: &str = "
DELETE FROM idempotency_keys WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM idempotency_keys WHERE expires_at <= now() LIMIT $1))";

impl Store {
    /// Writes a batch of new keys in one transaction and says, per write and
    /// in order, whether it was inserted or lost to an existing live key.
    /// The caller guarantees that no (client, key) appears twice in a batch.
    pub async fn write_keys(&self, batch: &[KeyWrite]) -> Result<Vec<WriteOutcome>, StoreError> {
        debug_assert!(!batch.is_empty());
        self.with_client(|mut client| async move {
            let cols = Columns::of(batch);
            let tx = client.transaction().await?;
            let insert = tx.prepare_cached(INSERT_BATCH).await?;
            let inserted: HashSet<Uuid> = tx
                .query(
                    &insert,
                    &[
                        &cols.transfer_id,
                        &cols.client_id,
                        &cols.key,
                        &cols.fingerprint,
                        &cols.status,
                        &cols.body,
                        &cols.created_at,
                        &cols.expires_at,
                        &cols.amount,
                        &cols.currency,
                        &cols.source,
                        &cols.destination,
                        &cols.description,
                        &cols.metadata,
                    ],
                )
                .await?
                .iter()
                .map(|r| r.get(0))
                .collect();

            let lost: Vec<&KeyWrite> = batch
                .iter()
                .filter(|w| !inserted.contains(&w.answer.transfer_id))
                .collect();
            let mut existing = HashMap::new();
            if !lost.is_empty() {
                let clients: Vec<Uuid> = lost.iter().map(|w| w.transfer.client_id.0).collect();
                let keys: Vec<&str> = lost
                    .iter()
                    .map(|w| w.transfer.idempotency_key.as_str())
                    .collect();
                let select = tx.prepare_cached(SELECT_EXISTING).await?;
                for row in tx.query(&select, &[&clients, &keys]).await? {
                    let (scope, answer) = answer_from_row(&row)?;
                    existing.insert(scope, answer);
                }
            }
            tx.commit().await?;

            Ok(batch
                .iter()
                .map(|w| {
                    if inserted.contains(&w.answer.transfer_id) {
                        return WriteOutcome::Inserted;
                    }
                    let scope = (w.transfer.client_id, w.transfer.idempotency_key.clone());
                    existing
                        .remove(&scope)
                        .map_or(WriteOutcome::Vanished, WriteOutcome::Existing)
                })
                .collect())
        })
        .await
    }

    /// Looks up the live answer stored for a key, if any.
    pub async fn find_answer(
        &self,
        client_id: ClientId,
        key: &IdempotencyKey,
    ) -> Result<Option<StoredAnswer>, StoreError> {
        self.with_client(|client| async move {
            let select = client.prepare_cached(SELECT_EXISTING).await?;
            let rows = client
                .query(&select, &[&vec![client_id.0], &vec![key.as_str()]])
                .await?;
            rows.first()
                .map(answer_from_row)
                .transpose()
                .map(|a| a.map(|(_, a)| a))
        })
        .await
    }

    /// Deletes up to `batch` expired key rows; returns how many went.
    pub async fn delete_expired_keys(&self, batch: i64) -> Result<u64, StoreError> {
        self.with_client(|client| async move {
            let stmt = client.prepare_cached(DELETE_EXPIRED).await?;
            Ok(client.execute(&stmt, &[&batch]).await?)
        })
        .await
    }
}

fn answer_from_row(
    row: &tokio_postgres::Row,
) -> Result<((ClientId, IdempotencyKey), StoredAnswer), StoreError> {
    let fp: Vec<u8> = row.get(2);
    let status: i32 = row.get(4);
    let body: Vec<u8> = row.get(5);
    let answer = StoredAnswer {
        fingerprint: Fingerprint::from_slice(&fp)
            .ok_or_else(|| StoreError::Corrupt("fingerprint length".into()))?,
        status: u16::try_from(status).map_err(|_| StoreError::Corrupt("status".into()))?,
        body: Bytes::from(body),
        transfer_id: row.get(3),
        expires_at: row.get(6),
    };
    let scope = (
        ClientId(row.get(0)),
        IdempotencyKey::from_trusted(row.get(1)),
    );
    Ok((scope, answer))
}

/// The batch turned inside out: one array per column, for `UNNEST`.
struct Columns {
    transfer_id: Vec<Uuid>,
    client_id: Vec<Uuid>,
    key: Vec<String>,
    fingerprint: Vec<Vec<u8>>,
    status: Vec<i32>,
    body: Vec<Vec<u8>>,
    created_at: Vec<DateTime<Utc>>,
    expires_at: Vec<DateTime<Utc>>,
    amount: Vec<i64>,
    currency: Vec<&'static str>,
    source: Vec<String>,
    destination: Vec<String>,
    description: Vec<Option<String>>,
    metadata: Vec<serde_json::Value>,
}

impl Columns {
    fn of(batch: &[KeyWrite]) -> Self {
        let mut c = Columns {
            transfer_id: Vec::with_capacity(batch.len()),
            client_id: Vec::with_capacity(batch.len()),
            key: Vec::with_capacity(batch.len()),
            fingerprint: Vec::with_capacity(batch.len()),
            status: Vec::with_capacity(batch.len()),
            body: Vec::with_capacity(batch.len()),
            created_at: Vec::with_capacity(batch.len()),
            expires_at: Vec::with_capacity(batch.len()),
            amount: Vec::with_capacity(batch.len()),
            currency: Vec::with_capacity(batch.len()),
            source: Vec::with_capacity(batch.len()),
            destination: Vec::with_capacity(batch.len()),
            description: Vec::with_capacity(batch.len()),
            metadata: Vec::with_capacity(batch.len()),
        };
        for w in batch {
            let t = &w.transfer;
            let r = &t.request;
            c.transfer_id.push(t.id);
            c.client_id.push(t.client_id.0);
            c.key.push(t.idempotency_key.as_str().to_owned());
            c.fingerprint.push(w.answer.fingerprint.0.to_vec());
            c.status.push(i32::from(w.answer.status));
            c.body.push(w.answer.body.to_vec());
            c.created_at.push(t.created_at);
            c.expires_at.push(w.answer.expires_at);
            c.amount.push(r.amount.minor_units());
            c.currency.push(r.currency.code());
            c.source.push(r.source_account.as_str().to_owned());
            c.destination
                .push(r.destination_account.as_str().to_owned());
            c.description
                .push(r.description.as_ref().map(|d| d.as_str().to_owned()));
            c.metadata
                .push(serde_json::to_value(r.metadata.entries()).unwrap_or_default());
        }
        c
    }
}
