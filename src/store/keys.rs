use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use tokio_postgres::types::Json;
use uuid::Uuid;

use super::tx::OpenTx;
use super::{Db, StoreError};
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
}

/// One new key to write: the transfer it creates and the answer to store.
#[derive(Debug, Clone)]
pub struct KeyWrite {
    /// The new transfer.
    pub transfer: Transfer,
    /// Fingerprint of the request.
    pub fingerprint: Fingerprint,
    /// The `201` body this attempt answers if it wins the key.
    pub body: Bytes,
}

/// Status of every answer a winning attempt stores.
pub const CREATED_STATUS: u16 = 201;

impl KeyWrite {
    /// The answer this write stores if it wins its key.
    pub fn answer(&self) -> StoredAnswer {
        StoredAnswer {
            fingerprint: self.fingerprint,
            status: CREATED_STATUS,
            body: self.body.clone(),
            transfer_id: self.transfer.id,
        }
    }
}

/// A live answer and how long Postgres's clock says it stays live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveAnswer {
    /// The answer.
    pub answer: StoredAnswer,
    /// Time left until the key's retention runs out, measured by Postgres's
    /// clock when the transaction started (so it is never longer than the truth).
    pub remaining: Duration,
}

/// What a flush did with one [`KeyWrite`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The key was new (or expired): the transfer, key row and outbox row were
    /// written, and the key stays live for the whole retention from the
    /// transaction's start by Postgres's clock.
    Inserted,
    /// The key already names a live answer, written earlier or by another process.
    Existing(LiveAnswer),
    /// The key row vanished between the conflict and the read-back (the reaper
    /// deleted it); nothing was written and a retry will insert it.
    Vanished,
}

/// How a flush writes its outbox rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutboxHandoff {
    /// Rows are written due and unclaimed, for any relay to claim; the
    /// caller wakes the relays once the flush has committed
    /// (`relay::RelayNudge`).
    Unclaimed,
    /// Rows are written already claimed by this process (attempt 1, with a
    /// lease), to be handed to its relay in memory after the commit: no
    /// claim transaction and no notification.
    Claimed {
        /// How long the claim holds the rows.
        lease: Duration,
    },
}

/// Bounds of one flush transaction.
#[derive(Debug, Clone, Copy)]
pub struct FlushLimits {
    /// How long a key is remembered, by Postgres's clock.
    pub key_retention: Duration,
    /// How long the flush waits for a row lock held by another transaction
    /// before it gives up (the flush is then split, so only the attempt that
    /// waited fails).
    pub lock_timeout: Duration,
}

/// One statement writes the whole batch: key rows (an expired row is
/// replaced, a live one is left alone; expiry is judged by Postgres's clock
/// only), then the transfers and outbox rows of the keys that were won.
/// Data-modifying CTEs all run, and foreign keys are checked at the end of
/// the statement. Rows arrive sorted by (client_id, key), so two flushes lock
/// keys in the same order and cannot deadlock.
const INSERT_BATCH: &str = "
WITH input AS (
    SELECT * FROM UNNEST($1::uuid[], $2::uuid[], $3::text[], $4::bytea[], $5::bytea[],
                         $6::timestamptz[], $7::int8[], $8::text[], $9::text[],
                         $10::text[], $11::text[], $12::jsonb[])
        AS i(transfer_id, client_id, key, fingerprint, response_body,
             created_at, amount, currency, source_account,
             destination_account, description, metadata)
), won AS (
    INSERT INTO idempotency_keys AS k
        (client_id, key, fingerprint, transfer_id, response_status, response_body, created_at, expires_at)
    SELECT client_id, key, fingerprint, transfer_id, 201, response_body, now(), now() + make_interval(secs => $13)
    FROM input
    ON CONFLICT (client_id, key) DO UPDATE SET
        fingerprint = EXCLUDED.fingerprint, transfer_id = EXCLUDED.transfer_id,
        response_status = EXCLUDED.response_status, response_body = EXCLUDED.response_body,
        created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
    WHERE k.expires_at <= now()
    RETURNING transfer_id
), new_transfers AS (
    INSERT INTO transfers (id, client_id, idempotency_key, status, amount, currency, source_account,
                           destination_account, description, metadata, created_at, updated_at)
    SELECT i.transfer_id, i.client_id, i.key, 'pending', i.amount, i.currency, i.source_account,
           i.destination_account, i.description, i.metadata, i.created_at, i.created_at
    FROM input i JOIN won USING (transfer_id)
    RETURNING id, client_id
), new_outbox AS (
    INSERT INTO outbox (transfer_id, client_id, attempts, locked_until)
    SELECT id, client_id, CASE WHEN $14 THEN 1 ELSE 0 END,
           CASE WHEN $14 THEN now() + make_interval(secs => $15) END
    FROM new_transfers
    RETURNING transfer_id
)
SELECT transfer_id FROM new_outbox";

/// Reads back the live rows that beat this batch's attempts. A separate
/// statement, so that under READ COMMITTED it sees rows that another process
/// committed while our insert waited on them. Also returns how long each
/// stays live by Postgres's clock.
const SELECT_EXISTING: &str = "
SELECT k.client_id, k.key, k.fingerprint, k.transfer_id, k.response_status, k.response_body,
       GREATEST(EXTRACT(EPOCH FROM k.expires_at - now()), 0)::float8
FROM idempotency_keys k
JOIN UNNEST($1::uuid[], $2::text[]) AS i(client_id, key) USING (client_id, key)
WHERE k.expires_at > now()";

/// The statements of every flush, which a shard's pool opens and prepares
/// before the process is ready.
const FLUSH_STATEMENTS: [&str; 2] = [INSERT_BATCH, SELECT_EXISTING];

/// Deletes one bounded batch of expired key rows.
/// Oldest first, by the expiry index. By `ctid`: a row replaced meanwhile
/// (its key written again after it expired) has a new one and is kept.
const DELETE_EXPIRED: &str = "
DELETE FROM idempotency_keys WHERE ctid = ANY(ARRAY(
    SELECT ctid FROM idempotency_keys WHERE expires_at <= now() ORDER BY expires_at LIMIT $1))";

/// How far the reaper is behind: expired rows (counted up to `$1`, so the
/// figure stays cheap however far behind it is) and the age of the oldest,
/// both by the expiry index.
const EXPIRED_BACKLOG: &str = "
SELECT (SELECT count(*) FROM (SELECT 1 FROM idempotency_keys WHERE expires_at <= now() LIMIT $1) e),
       COALESCE(EXTRACT(EPOCH FROM now() - (SELECT min(expires_at) FROM idempotency_keys
                                            WHERE expires_at <= now()))::float8, 0)";

/// Idempotency keys: the shards' flushes (a key, its transfer and its
/// outbox row in one statement) and the reaper's deletions.
#[derive(Clone)]
pub struct KeyStore(pub(super) Db);

impl KeyStore {
    /// Opens every connection of the pool and prepares the flush's
    /// statements on each (see [`Store::warm_pool`]); returns how many are
    /// open. Run it on the thread that flushes: a connection is driven
    /// there.
    pub async fn warm(&self) -> Result<usize, StoreError> {
        self.0.warm(usize::MAX, &FLUSH_STATEMENTS).await
    }

    /// Writes a batch of new keys in one transaction and says, per write and
    /// in order, whether it was inserted or lost to an existing live key.
    /// The caller guarantees that no (client, key) appears twice in a batch.
    ///
    /// A row lock held elsewhere for longer than `limits.lock_timeout` fails
    /// the whole transaction with [`StoreError::is_row_specific`] true, so the
    /// caller can split the batch and find the one attempt that waited.
    ///
    /// `on_executed` runs once the statements are done, right before COMMIT:
    /// the caller may start its next flush while this one's commit is made
    /// durable.
    pub async fn write_keys(
        &self,
        batch: &[KeyWrite],
        handoff: OutboxHandoff,
        limits: FlushLimits,
        on_executed: impl FnOnce() + Send,
    ) -> Result<Vec<WriteOutcome>, StoreError> {
        assert!(!batch.is_empty(), "a flush writes at least one key");
        debug_assert_eq!(
            batch
                .iter()
                .map(|w| (w.transfer.client_id, w.transfer.idempotency_key.as_str()))
                .collect::<HashSet<_>>()
                .len(),
            batch.len(),
            "a key appears once per flush"
        );
        let (claim, lease) = match handoff {
            OutboxHandoff::Unclaimed => (false, Duration::ZERO),
            OutboxHandoff::Claimed { lease } => (true, lease),
        };
        let lock_timeout = format!(
            "SET LOCAL lock_timeout = {};",
            limits.lock_timeout.as_millis().max(1)
        );
        self.0
            .with_client(|client| async move {
                let cols = Columns::of(batch);
                let tx = OpenTx::new(client);
                let insert = tx.client().prepare_cached(INSERT_BATCH).await?;
                let retention = limits.key_retention.as_secs_f64();
                let lease = lease.as_secs_f64();
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 15] = [
                    &cols.transfer_id,
                    &cols.client_id,
                    &cols.key,
                    &cols.fingerprint,
                    &cols.body,
                    &cols.created_at,
                    &cols.amount,
                    &cols.currency,
                    &cols.source,
                    &cols.destination,
                    &cols.description,
                    &cols.metadata,
                    &retention,
                    &claim,
                    &lease,
                ];
                // BEGIN and the insert go out in one round trip.
                let (begun, rows) =
                    futures::join!(tx.begin(&lock_timeout), tx.client().query(&insert, &params));
                // The first failure is the cause; the insert fails too when BEGIN did.
                let rows = match (begun, rows) {
                    (Ok(()), Ok(rows)) => rows,
                    (Err(e), _) | (_, Err(e)) => {
                        tx.rollback().await;
                        return Err(e.into());
                    }
                };
                let inserted: HashSet<Uuid> = rows.iter().map(|r| r.get(0)).collect();

                let existing = existing_answers(tx.client(), batch, &inserted).await?;
                on_executed();
                tx.commit().await?;

                Ok(outcomes(batch, &inserted, existing))
            })
            .await
    }

    /// Deletes up to `batch` expired key rows; returns how many went.
    pub async fn delete_expired(&self, batch: i64) -> Result<u64, StoreError> {
        self.0
            .with_client(|client| async move {
                let stmt = client.prepare_cached(DELETE_EXPIRED).await?;
                Ok(client.execute(&stmt, &[&batch]).await?)
            })
            .await
    }

    /// Expired key rows not yet deleted (counted up to `count_max`) and the
    /// age of the oldest in seconds (0 when none is).
    pub async fn expired_backlog(&self, count_max: i64) -> Result<(i64, f64), StoreError> {
        self.0
            .with_client(|client| async move {
                let stmt = client.prepare_cached(EXPIRED_BACKLOG).await?;
                let row = client.query_one(&stmt, &[&count_max]).await?;
                Ok((row.get(0), row.get(1)))
            })
            .await
    }
}

fn answer_from_row(
    row: &tokio_postgres::Row,
) -> Result<((ClientId, IdempotencyKey), LiveAnswer), StoreError> {
    let fp: Vec<u8> = row.get(2);
    let status: i32 = row.get(4);
    let body: Vec<u8> = row.get(5);
    let remaining_secs: f64 = row.get(6);
    let answer = StoredAnswer {
        fingerprint: Fingerprint::from_slice(&fp)
            .ok_or_else(|| StoreError::Corrupt("fingerprint length".into()))?,
        status: u16::try_from(status).map_err(|_| StoreError::Corrupt("status".into()))?,
        body: Bytes::from(body),
        transfer_id: row.get(3),
    };
    let remaining = Duration::try_from_secs_f64(remaining_secs)
        .map_err(|_| StoreError::Corrupt("expires_at".into()))?;
    let scope = (
        ClientId(row.get(0)),
        IdempotencyKey::from_trusted(row.get(1)),
    );
    Ok((scope, LiveAnswer { answer, remaining }))
}

/// The batch turned inside out: one array per column, for `UNNEST`, in
/// (client_id, key) order so that every flush takes its row locks in the
/// same order as every other.
struct Columns<'a> {
    transfer_id: Vec<Uuid>,
    client_id: Vec<Uuid>,
    key: Vec<&'a str>,
    fingerprint: Vec<&'a [u8]>,
    body: Vec<&'a [u8]>,
    created_at: Vec<DateTime<Utc>>,
    amount: Vec<i64>,
    currency: Vec<&'static str>,
    source: Vec<&'a str>,
    destination: Vec<&'a str>,
    description: Vec<Option<&'a str>>,
    metadata: Vec<Json<&'a BTreeMap<String, String>>>,
}

impl<'a> Columns<'a> {
    fn of(batch: &'a [KeyWrite]) -> Self {
        let mut order: Vec<&KeyWrite> = batch.iter().collect();
        order.sort_unstable_by(|a, b| {
            (a.transfer.client_id.0, a.transfer.idempotency_key.as_str())
                .cmp(&(b.transfer.client_id.0, b.transfer.idempotency_key.as_str()))
        });
        let n = batch.len();
        let mut c = Columns {
            transfer_id: Vec::with_capacity(n),
            client_id: Vec::with_capacity(n),
            key: Vec::with_capacity(n),
            fingerprint: Vec::with_capacity(n),
            body: Vec::with_capacity(n),
            created_at: Vec::with_capacity(n),
            amount: Vec::with_capacity(n),
            currency: Vec::with_capacity(n),
            source: Vec::with_capacity(n),
            destination: Vec::with_capacity(n),
            description: Vec::with_capacity(n),
            metadata: Vec::with_capacity(n),
        };
        for w in order {
            let t = &w.transfer;
            let r = &t.request;
            c.transfer_id.push(t.id);
            c.client_id.push(t.client_id.0);
            c.key.push(t.idempotency_key.as_str());
            c.fingerprint.push(&w.fingerprint.0);
            c.body.push(&w.body);
            c.created_at.push(t.created_at);
            c.amount.push(r.amount.minor_units());
            c.currency.push(r.currency.code());
            c.source.push(r.source_account.as_str());
            c.destination.push(r.destination_account.as_str());
            c.description
                .push(r.description.as_ref().map(|d| d.as_str()));
            // Serialized straight into the wire format, no JSON tree between.
            c.metadata.push(Json(r.metadata.entries()));
        }
        c
    }
}

/// The answers of the live keys that the writes of `batch` not `inserted`
/// lost to, by scope (one statement, only when some write lost).
async fn existing_answers(
    client: &deadpool_postgres::Object,
    batch: &[KeyWrite],
    inserted: &HashSet<Uuid>,
) -> Result<HashMap<(ClientId, IdempotencyKey), LiveAnswer>, StoreError> {
    let lost: Vec<&KeyWrite> = batch
        .iter()
        .filter(|w| !inserted.contains(&w.transfer.id))
        .collect();
    let mut existing = HashMap::new();
    if lost.is_empty() {
        return Ok(existing);
    }
    let clients: Vec<Uuid> = lost.iter().map(|w| w.transfer.client_id.0).collect();
    let keys: Vec<&str> = lost
        .iter()
        .map(|w| w.transfer.idempotency_key.as_str())
        .collect();
    let select = client.prepare_cached(SELECT_EXISTING).await?;
    for row in client.query(&select, &[&clients, &keys]).await? {
        let (scope, answer) = answer_from_row(&row)?;
        existing.insert(scope, answer);
    }
    assert!(existing.len() <= lost.len(), "one live key per lost write");
    Ok(existing)
}

/// Per write of `batch`, in order: inserted, lost to the live key's
/// answer, or lost to a key gone since (it expired in between).
fn outcomes(
    batch: &[KeyWrite],
    inserted: &HashSet<Uuid>,
    mut existing: HashMap<(ClientId, IdempotencyKey), LiveAnswer>,
) -> Vec<WriteOutcome> {
    batch
        .iter()
        .map(|w| {
            if inserted.contains(&w.transfer.id) {
                return WriteOutcome::Inserted;
            }
            let scope = (w.transfer.client_id, w.transfer.idempotency_key.clone());
            existing
                .remove(&scope)
                .map_or(WriteOutcome::Vanished, WriteOutcome::Existing)
        })
        .collect()
}
