//! The one leased work queue, as SQL. The outbox and webhook deliveries are
//! both tables of due rows that a worker claims with a lease, works on
//! outside any transaction, and then settles: done, due again later, or
//! dead. What they share lives here, once; what differs (the table, its key,
//! what a claim returns, what "done" writes) is a [`QueueTable`]
//! description, from which the statements are built when first used.
//!
//! The rules every queue gets:
//! - A claim locks due rows nobody holds with `FOR UPDATE SKIP LOCKED`, so
//!   processes never wait on each other, and stamps a lease.
//! - `attempts`, raised by every claim and never lowered, is the fencing
//!   token: a settlement writes only where the row still carries its
//!   claim's number, so a holder whose lease ran out writes nothing.
//! - `attempts - attempts_base` is the current retry budget; an operator's
//!   requeue raises `attempts_base` instead of lowering `attempts`.
//! - A row claimed while a lease is still stamped on it (`locked_until` is
//!   cleared by every settlement) was taken over from a holder that never
//!   recorded an outcome: it is *reclaimed*. The claim says so, and a queue
//!   may record it (the outbox marks such a row ambiguous: the vanished
//!   holder may have called the provider).
//! - A queue may claim fairly by columns (deliveries by endpoint and by
//!   client): at most a share of rows of one value are held at once over
//!   every process, so one slow receiver takes its own slots, never
//!   everybody's. Or per group of the claiming worker (the outbox by
//!   client): each group handed at most what the worker says it may still
//!   hold.
//! - Either way a claim picks per group, on the index `(group, due)`, the
//!   groups' oldest rows first in turn. It costs what it hands out (one
//!   index descent per group with open rows, then the rows it hands out
//!   and the ones it skips as leased), never what waits: a client with
//!   millions of due rows slows no one else's claim (tests/pick_cost.rs).

use std::time::Duration;

use deadpool_postgres::GenericClient;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

/// The parts of a queue table that differ from one queue to another.
#[derive(Debug)]
pub struct QueueTable {
    /// The table.
    pub table: &'static str,
    /// The key columns with their SQL types, in order.
    pub key: &'static [(&'static str, &'static str)],
    /// The column saying when a row is next due.
    pub due: &'static str,
    /// Rows still open (neither done nor dead), on the alias `q`.
    pub open: &'static str,
    /// More to set on a claim (on `q`, with `due.reclaimed` in scope), or "".
    pub on_claim: &'static str,
    /// More columns of `q` the claim returns (", q.col ..."), or "".
    pub claim_returns: &'static str,
    /// Claim fairly by these columns, counting what every process holds
    /// (see the module's notes): a claim passes one share per column. The
    /// first is the `group_by` column.
    pub fair_by: &'static [&'static str],
    /// The column (name, SQL type) a pick walks group by group, on an
    /// index on `(column, due)` with the `open` predicate. With no
    /// `fair_by`, what each group may still take is the claiming worker's
    /// own count ([`QueueTable::group_pick_sql`]); with it, what every
    /// process holds ([`QueueTable::pick_sql`]).
    pub group_by: Option<(&'static str, &'static str)>,
    /// The statement that returns what a worker needs, reading the CTE
    /// `claimed` (the key columns, `attempts`, `budget_used`, `reclaimed`,
    /// `leased`).
    pub payload: &'static str,
    /// One more column a reschedule writes: its name in the input, its SQL
    /// type, and the assignment (with `q` and `i` in scope).
    pub reschedule_extra: (&'static str, &'static str, &'static str),
}

impl QueueTable {
    fn keys(&self, alias: &str) -> String {
        self.key
            .iter()
            .map(|(k, _)| format!("{alias}.{k}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn key_match(&self, left: &str, right: &str) -> String {
        self.key
            .iter()
            .map(|(k, _)| format!("{left}.{k} = {right}.{k}"))
            .collect::<Vec<_>>()
            .join(" AND ")
    }

    /// Free to claim: open, due, and no lease or an expired one.
    fn claimable(&self) -> String {
        format!(
            "{open} AND q.{due} <= now() AND (q.locked_until IS NULL OR q.locked_until <= now())",
            open = self.open,
            due = self.due
        )
    }

    /// Whether a claim takes the rows a pick chose beforehand
    /// ([`pick_sql`](Self::pick_sql) or [`group_pick_sql`](Self::group_pick_sql)).
    fn picks(&self) -> bool {
        !self.fair_by.is_empty() || self.group_by.is_some()
    }

    /// `$1` limit, `$2` lease in seconds; a fair queue's claim takes, as
    /// `$3`, the `ctid`s its [`pick_sql`](Self::pick_sql) chose. A fair
    /// claim locks, then updates, its rows by `ctid`: locked in this
    /// statement, a row keeps it until this statement's own update.
    pub fn claim_sql(&self) -> String {
        let t = self.table;
        let due_col = self.due;
        let due = if !self.picks() {
            format!(
                "due AS (
    SELECT {qkeys}, q.locked_until IS NOT NULL AS reclaimed FROM {t} q
    WHERE {claimable}
    ORDER BY q.{due_col} LIMIT $1
    FOR UPDATE SKIP LOCKED
)",
                qkeys = self.keys("q"),
                claimable = self.claimable(),
            )
        } else {
            // The rows [`QueueTable::pick_sql`] chose, by `ctid` (`$3`),
            // and nothing else in the WHERE clause: a TID scan is then the
            // plan whatever the planner thinks of the table (with the
            // claimable test there too, young statistics made it walk the
            // whole due index instead; docs/BENCHMARKS.md has the plans).
            // Whether a row is still claimable is read from the row as
            // locked; a row changed since the pick has a new `ctid` and is
            // skipped.
            format!(
                "due AS (
    SELECT q.ctid AS row_ctid, q.locked_until IS NOT NULL AS reclaimed,
           {claimable} AS claimable
    FROM {t} q
    WHERE q.ctid = ANY ($3::text[]::tid[])
    LIMIT $1
    FOR UPDATE OF q SKIP LOCKED
)",
                claimable = self.claimable(),
            )
        };
        format!(
            "WITH {due}, claimed AS (
    UPDATE {t} q SET attempts = q.attempts + 1, locked_until = now() + make_interval(secs => $2){on_claim}
    FROM due WHERE {dmatch}
    RETURNING {qkeys}, q.attempts, q.attempts - q.attempts_base AS budget_used, due.reclaimed,
              q.locked_until > now() AS leased{claim_returns}
)
{payload}",
            on_claim = self.on_claim,
            claim_returns = self.claim_returns,
            // A fair claim's rows come by ctid (see above); a plain claim's
            // by their key, a primary key lookup per row.
            dmatch = if !self.picks() {
                self.key_match("q", "due")
            } else {
                "q.ctid = due.row_ctid AND due.claimable".to_owned()
            },
            qkeys = self.keys("q"),
            payload = self.payload,
        )
    }

    /// A fair queue's pick, read only: the `ctid`s (as text) of up to `$1`
    /// rows to claim, with each fair column `i`'s share in parameter
    /// `2 + i`. What each group holds now is read once (from the small
    /// partial indexes of held rows). The rows are then picked per value of
    /// the first fair column (the queue's `group_by`: deliveries per
    /// endpoint), walking its `(group, due)` index: one descent per group
    /// with open rows, then at most what is left of that group's share,
    /// oldest first; a group holding its share reads no row. Among those,
    /// each value of every other fair column gets at most what is left of
    /// its share; rows are handed out in the order of what their groups
    /// would then hold, fewest first. So a claim reads what it may hand out, never a backlog: a
    /// hanging receiver with millions of due deliveries costs one descent.
    /// [`claim_sql`](Self::claim_sql) then locks and leases what is still
    /// claimable of them. Two statements, because in one the planner,
    /// misled by a queue table's young statistics, turned the lock by
    /// `ctid` into a walk of a whole index (docs/BENCHMARKS.md).
    pub fn pick_sql(&self) -> String {
        assert!(!self.fair_by.is_empty(), "only a fair queue picks");
        let (walked, _) = self.group_by.expect("a fair queue is picked per group");
        assert_eq!(
            walked, self.fair_by[0],
            "groups are walked by the first fair column"
        );
        let t = self.table;
        let due_col = self.due;
        let share = |i: usize| format!("${}::int8", i + 2);
        // `IS NOT NULL` spelled out, so that the planner can take the
        // partial index of held rows.
        let held = format!(
            "held AS MATERIALIZED (
    SELECT {cols} FROM {t} WHERE locked_until IS NOT NULL AND locked_until > now()
)",
            cols = self.fair_by.join(", ")
        );
        let busy: String = self
            .fair_by
            .iter()
            .enumerate()
            .map(|(i, g)| {
                format!(", busy_{i} AS (SELECT {g} AS grp, count(*) AS n FROM held GROUP BY {g})")
            })
            .collect();
        let columns: String = self
            .fair_by
            .iter()
            .enumerate()
            .map(|(i, g)| format!(", q.{g} AS grp_{i}"))
            .collect();
        let nths: String = (1..self.fair_by.len())
            .map(|i| {
                format!(
                    ",\n           row_number() OVER (PARTITION BY c.grp_{i} ORDER BY c.due_at) + COALESCE(b_{i}.n, 0) AS nth_{i}"
                )
            })
            .collect();
        let joins: String = (1..self.fair_by.len())
            .map(|i| format!("\n    LEFT JOIN busy_{i} b_{i} ON b_{i}.grp = c.grp_{i}"))
            .collect();
        let within: String = (1..self.fair_by.len())
            .map(|i| format!("f.nth_{i} <= {} AND ", share(i)))
            .collect();
        // The group that would hold the fewest comes first, by the last
        // fair column first (deliveries: the client): when every slot is
        // held, a freed one goes to a client holding none before another
        // row of a client holding many, so a tenant whose receivers are
        // healthy waits for one slot, never for the others' backlogs.
        let order: String = (0..self.fair_by.len())
            .rev()
            .map(|i| format!("f.nth_{i}, "))
            .collect();
        format!(
            "{groups}, {held}{busy}, cand AS (
    SELECT p.* FROM grp LEFT JOIN busy_0 b_0 ON b_0.grp = grp.g
    CROSS JOIN LATERAL (
        SELECT q.ctid AS row_ctid{columns}, q.{due_col} AS due_at,
               row_number() OVER (ORDER BY q.{due_col}) + COALESCE(b_0.n, 0) AS nth_0
        FROM {t} q
        WHERE q.{walked} = grp.g AND {claimable}
        ORDER BY q.{due_col} LIMIT GREATEST(LEAST({share_0} - COALESCE(b_0.n, 0), $1::int8), 0)
    ) p
    WHERE grp.g IS NOT NULL
), fair AS (
    SELECT c.*{nths}
    FROM cand c{joins}
)
SELECT f.row_ctid::text FROM fair f WHERE {within}true ORDER BY {order}f.due_at LIMIT $1",
            groups = self.groups_sql(),
            share_0 = share(0),
            claimable = self.claimable(),
        )
    }

    /// A per-group pick, read only: the `ctid`s (as text) of up to `$1`
    /// rows to claim. `$2` is what one group may hold; `$3` and `$4` the
    /// groups the claiming worker holds rows of and how many. The groups
    /// with open rows are found by walking the `(group, due)` index one
    /// descent per group (a loose index scan: Postgres 15 has no skip
    /// scan of its own); each gets at most what is left of its share, its
    /// oldest claimable rows first; rows are handed out in the order of
    /// what their groups would then hold, fewest first (a client holding
    /// nothing gets its first row before another row of a busy one). A
    /// group with no room reads no row.
    pub fn group_pick_sql(&self) -> String {
        assert!(
            self.fair_by.is_empty(),
            "a fair queue counts what every process holds"
        );
        let (g, ty) = self.group_by.expect("only a grouped queue picks per group");
        let t = self.table;
        format!(
            "{groups}, room AS (
    SELECT grp.g, COALESCE(h.n, 0) AS held, GREATEST($2::int8 - COALESCE(h.n, 0), 0) AS n
    FROM grp LEFT JOIN UNNEST($3::{ty}[], $4::int8[]) AS h(g, n) ON h.g = grp.g
    WHERE grp.g IS NOT NULL
)
SELECT p.row_ctid::text FROM room CROSS JOIN LATERAL (
    SELECT q.ctid AS row_ctid, q.{due} AS due_at,
           row_number() OVER (ORDER BY q.{due}) + room.held AS nth
    FROM {t} q
    WHERE q.{g} = room.g AND {claimable}
    ORDER BY q.{due} LIMIT LEAST(room.n, $1::int8)
) p
ORDER BY p.nth, p.due_at LIMIT $1",
            groups = self.groups_sql(),
            due = self.due,
            claimable = self.claimable(),
        )
    }

    /// `WITH RECURSIVE grp(g) AS (...)`: the values of a grouped queue's
    /// group column that have open rows (and a last `NULL`), one descent of
    /// the `(group, due)` index each, however many rows a group has.
    pub fn groups_sql(&self) -> String {
        let (g, _) = self.group_by.expect("only a grouped queue has groups");
        format!(
            "WITH RECURSIVE grp(g) AS (
    (SELECT q.{g} FROM {t} q WHERE {open} ORDER BY q.{g} LIMIT 1)
    UNION ALL
    SELECT (SELECT q.{g} FROM {t} q WHERE {open} AND q.{g} > grp.g ORDER BY q.{g} LIMIT 1)
    FROM grp WHERE grp.g IS NOT NULL
)",
            t = self.table,
            open = self.open,
        )
    }

    /// The age in seconds of the oldest due open row (0 when none is due),
    /// as a scalar subquery: the oldest due row of each group, one descent
    /// of the `(group, due)` index per group. A grouped queue keeps no
    /// index on its due column alone (see migration V10).
    pub fn oldest_due_age_sql(&self) -> String {
        let (g, _) = self.group_by.expect("only a grouped queue has groups");
        format!(
            "COALESCE(({groups}
SELECT EXTRACT(EPOCH FROM now() - min(o.due))::float8 FROM grp CROSS JOIN LATERAL (
    SELECT q.{due} AS due FROM {t} q
    WHERE q.{g} = grp.g AND {open} AND q.{due} <= now()
    ORDER BY q.{due} LIMIT 1
) o WHERE grp.g IS NOT NULL), 0)",
            groups = self.groups_sql(),
            t = self.table,
            due = self.due,
            open = self.open,
        )
    }

    /// The `UNNEST` of a statement's inputs: one array per key column, then
    /// one per `(name, type)` of `rest`, numbered from `$1`, and the names
    /// of the columns it yields.
    fn unnest(&self, rest: &[(&str, &str)]) -> (String, String) {
        let columns: Vec<(&str, &str)> = self
            .key
            .iter()
            .copied()
            .chain(rest.iter().copied())
            .collect();
        let inputs: Vec<String> = columns
            .iter()
            .enumerate()
            .map(|(i, (_, ty))| format!("${}::{ty}[]", i + 1))
            .collect();
        let names: Vec<&str> = columns.iter().map(|(name, _)| *name).collect();
        (inputs.join(", "), names.join(", "))
    }

    /// Retries and dead letters of a batch, each written only where the row
    /// still carries its claim's number. Inputs: the key columns, then
    /// attempt, delay (s), error, dead, and the extra column.
    pub fn reschedule_sql(&self) -> String {
        let (extra_name, extra_type, extra_set) = self.reschedule_extra;
        let (inputs, names) = self.unnest(&[
            ("attempt", "int4"),
            ("delay", "float8"),
            ("error", "text"),
            ("dead", "bool"),
            (extra_name, extra_type),
        ]);
        format!(
            "UPDATE {t} q SET
    {due} = now() + make_interval(secs => i.delay),
    locked_until = NULL,
    last_error = i.error,
    dead_at = CASE WHEN i.dead THEN now() END,
    {extra_set}
FROM UNNEST({inputs}) AS i({names})
WHERE {imatch} AND q.attempts = i.attempt
RETURNING {qkeys}, q.attempts",
            t = self.table,
            due = self.due,
            imatch = self.key_match("q", "i"),
            qkeys = self.keys("q"),
        )
    }

    /// Deletes the rows whose work is done, each only while still held
    /// under its claim; answers the keys of those deleted. Inputs: the key
    /// columns, then the claim's attempt.
    pub fn complete_sql(&self) -> String {
        let (inputs, names) = self.unnest(&[("attempt", "int4")]);
        format!(
            "DELETE FROM {t} q USING UNNEST({inputs}) AS i({names})
WHERE {imatch} AND q.attempts = i.attempt
RETURNING {qkeys}",
            t = self.table,
            imatch = self.key_match("q", "i"),
            qkeys = self.keys("q"),
        )
    }

    /// Gives back rows claimed and never worked on (a drain): due at once
    /// and without a lease, so the next claim does not take them for
    /// reclaimed, and the claim is not charged to the retry budget (a row
    /// an operator requeued meanwhile already starts a fresh budget: its
    /// base stays at its claims). Each only while still held under its
    /// claim. Inputs: the key columns, then the claim's attempt.
    pub fn release_sql(&self) -> String {
        let (inputs, names) = self.unnest(&[("attempt", "int4")]);
        format!(
            "UPDATE {t} q SET locked_until = NULL, {due} = now(),
    attempts_base = LEAST(q.attempts_base + 1, q.attempts)
FROM UNNEST({inputs}) AS i({names})
WHERE {imatch} AND q.attempts = i.attempt AND q.locked_until IS NOT NULL",
            t = self.table,
            due = self.due,
            imatch = self.key_match("q", "i"),
        )
    }

    /// The assignments that put a row back in line with a fresh retry
    /// budget, on the alias `q`, due at `due` (an SQL expression): the
    /// fencing token is never lowered, the budget starts where it stands.
    pub fn requeue_set(&self, due: &str) -> String {
        format!(
            "dead_at = NULL, attempts_base = q.attempts, {} = {due}",
            self.due
        )
    }
}

/// What every claimed row carries, whatever its queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Claim {
    /// This claim's number (1 for the first claim ever): the fencing token.
    pub attempt: i32,
    /// Claims counted against the current retry budget, this one included.
    pub budget_used: i32,
    /// Taken over from a holder whose lease ran out without a recorded
    /// outcome.
    pub reclaimed: bool,
}

impl Claim {
    /// Reads the claim columns of a row the claim statement returned.
    pub(super) fn of(row: &Row) -> Self {
        let claim = Self {
            attempt: row.get("attempts"),
            budget_used: row.get("budget_used"),
            reclaimed: row.get("reclaimed"),
        };
        assert!(
            row.get::<_, bool>("leased"),
            "a lease is granted in the future"
        );
        assert!(
            claim.budget_used >= 1 && claim.budget_used <= claim.attempt,
            "a claim counts against its budget, which lies within the claims: {claim:?}"
        );
        claim
    }
}

/// Claims up to `limit` rows for `lease` with a statement built by
/// [`QueueTable::claim_sql`] of a queue that is not fair.
pub(super) async fn claim<C: GenericClient>(
    client: &C,
    sql: &str,
    limit: i64,
    lease: Duration,
) -> Result<Vec<Row>, tokio_postgres::Error> {
    assert!(limit > 0, "a claim asks for at least one row");
    assert!(!lease.is_zero(), "a lease lasts");
    let stmt = client.prepare_cached(sql).await?;
    let rows = client.query(&stmt, &[&limit, &lease.as_secs_f64()]).await?;
    assert!(
        rows.len() as i64 <= limit,
        "a claim never returns more than its limit"
    );
    Ok(rows)
}

/// A fair queue's claim: picks up to `limit` rows with `pick` (built by
/// [`QueueTable::pick_sql`]), `shares` holding per fair column what one
/// group may hold at once, then claims what is still claimable of them
/// with `sql` ([`QueueTable::claim_sql`]). Two concurrent claimers may pick
/// the same rows; SKIP LOCKED and the lease check give each row to one.
pub(super) async fn claim_fairly<C: GenericClient>(
    client: &C,
    pick: &str,
    sql: &str,
    limit: i64,
    lease: Duration,
    shares: &[i64],
) -> Result<Vec<Row>, tokio_postgres::Error> {
    assert!(limit > 0, "a claim asks for at least one row");
    assert!(!lease.is_zero(), "a lease lasts");
    assert!(
        !shares.is_empty() && shares.iter().all(|s| *s > 0),
        "every group may hold a row"
    );
    let mut params: Vec<&(dyn ToSql + Sync)> = vec![&limit];
    params.extend(shares.iter().map(|s| s as &(dyn ToSql + Sync)));
    claim_picked(client, pick, &params, sql, limit, lease).await
}

/// Gives back rows claimed and never worked on, of a queue keyed by one
/// id, with its [`QueueTable::release_sql`] statement `sql`; answers how
/// many were still held under their claims.
pub(super) async fn release_by_id(
    db: &super::Db,
    sql: &str,
    claims: &[(uuid::Uuid, i32)],
) -> Result<u64, super::StoreError> {
    let (ids, attempts): (Vec<uuid::Uuid>, Vec<i32>) = claims.iter().copied().unzip();
    db.with_client(|client| async move {
        let stmt = client.prepare_cached(sql).await?;
        let n = client.execute(&stmt, &[&ids, &attempts]).await?;
        assert!(n as usize <= ids.len(), "a row is given back at most once");
        Ok(n)
    })
    .await
}

/// Picks rows with `pick` (its parameters `params`), then claims for
/// `lease` what is still claimable of them with `sql` (a
/// [`QueueTable::claim_sql`] of a queue that picks).
async fn claim_picked<C: GenericClient>(
    client: &C,
    pick: &str,
    params: &[&(dyn ToSql + Sync)],
    sql: &str,
    limit: i64,
    lease: Duration,
) -> Result<Vec<Row>, tokio_postgres::Error> {
    let stmt = client.prepare_cached(pick).await?;
    let picked: Vec<String> = client
        .query(&stmt, params)
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(picked.len() as i64 <= limit, "a pick keeps to its limit");
    if picked.is_empty() {
        return Ok(Vec::new());
    }
    let stmt = client.prepare_cached(sql).await?;
    let rows = client
        .query(&stmt, &[&limit, &lease.as_secs_f64(), &picked])
        .await?;
    assert!(
        rows.len() <= picked.len(),
        "a claim takes only rows it picked"
    );
    Ok(rows)
}

/// A per-group claim: picks up to `limit` rows with `pick` (built by
/// [`QueueTable::group_pick_sql`]), each group getting at most `share` less
/// what `held` says it holds, then claims what is still claimable of them
/// with `sql` ([`QueueTable::claim_sql`]).
pub(super) async fn claim_by_group<C: GenericClient, G: ToSql + Sync>(
    client: &C,
    pick: &str,
    sql: &str,
    limit: i64,
    lease: Duration,
    share: i64,
    held: &[(G, usize)],
) -> Result<Vec<Row>, tokio_postgres::Error> {
    assert!(limit > 0, "a claim asks for at least one row");
    assert!(!lease.is_zero(), "a lease lasts");
    assert!(share > 0, "every group may hold a row");
    let (groups, counts): (Vec<&G>, Vec<i64>) = held.iter().map(|(g, n)| (g, *n as i64)).unzip();
    let params: [&(dyn ToSql + Sync); 4] = [&limit, &share, &groups, &counts];
    claim_picked(client, pick, &params, sql, limit, lease).await
}

/// The retries and dead letters of a batch, one array per input column of
/// [`QueueTable::reschedule_sql`] after the key.
#[derive(Debug, Default)]
pub(super) struct Reschedule<'a, E> {
    pub attempt: Vec<i32>,
    pub delay: Vec<f64>,
    pub error: Vec<&'a str>,
    pub dead: Vec<bool>,
    pub extra: Vec<E>,
}

impl<'a, E: ToSql + Sync> Reschedule<'a, E> {
    /// Adds a row: `delay` before it is due again, or dead with `None`.
    pub fn push(&mut self, attempt: i32, delay: Option<Duration>, error: &'a str, extra: E) {
        self.attempt.push(attempt);
        self.delay.push(delay.map_or(0.0, |d| d.as_secs_f64()));
        self.dead.push(delay.is_none());
        self.error.push(error);
        self.extra.push(extra);
    }

    /// How many rows.
    pub fn len(&self) -> usize {
        self.attempt.len()
    }

    /// Writes them (after the key columns `keys`); returns the rows still
    /// held, each with its key and `attempts`.
    pub async fn run<C: GenericClient>(
        &self,
        client: &C,
        sql: &str,
        keys: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, tokio_postgres::Error> {
        if self.attempt.is_empty() {
            return Ok(Vec::new());
        }
        let stmt = client.prepare_cached(sql).await?;
        let mut params: Vec<&(dyn ToSql + Sync)> = keys.to_vec();
        params.extend([
            &self.attempt as &(dyn ToSql + Sync),
            &self.delay,
            &self.error,
            &self.dead,
            &self.extra,
        ]);
        let rows = client.query(&stmt, &params).await?;
        assert!(rows.len() <= self.len(), "a row is settled at most once");
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::super::outbox::OUTBOX;
    use super::super::webhooks::DELIVERIES;

    #[test]
    fn every_queue_claims_with_skip_locked_and_settles_fenced() {
        for q in [&OUTBOX, &DELIVERIES] {
            let claim = q.claim_sql();
            assert!(
                claim.contains("FOR UPDATE SKIP LOCKED")
                    || claim.contains("FOR UPDATE OF q SKIP LOCKED")
            );
            assert!(claim.contains("attempts = q.attempts + 1"), "{claim}");
            assert!(
                claim.contains("q.locked_until IS NOT NULL AS reclaimed"),
                "{claim}"
            );
            let release = q.release_sql();
            assert!(release.contains("AND q.attempts = i.attempt"), "{release}");
            let reschedule = q.reschedule_sql();
            assert!(
                reschedule.contains("AND q.attempts = i.attempt"),
                "{reschedule}"
            );
            assert!(reschedule.contains("locked_until = NULL"), "{reschedule}");
        }
        // Only the fair queue counts what each group holds, in its pick,
        // reading the held rows once for both shares; its claim takes the
        // picked rows by ctid.
        assert!(!OUTBOX.claim_sql().contains("busy"));
        assert!(OUTBOX
            .claim_sql()
            .contains("q.ctid = ANY ($3::text[]::tid[])"));
        let pick = OUTBOX.group_pick_sql();
        assert!(pick.contains("WITH RECURSIVE grp(g)"), "{pick}");
        assert!(pick.contains("LIMIT LEAST(room.n, $1::int8)"), "{pick}");
        let pick = DELIVERIES.pick_sql();
        assert!(pick.contains("WITH RECURSIVE grp(g)"), "{pick}");
        assert!(pick.contains("WHERE q.endpoint_id = grp.g"), "{pick}");
        assert!(pick.contains("PARTITION BY c.grp_1"), "{pick}");
        assert_eq!(pick.matches("WHERE locked_until IS NOT NULL").count(), 1);
        assert!(!pick.contains("FOR UPDATE"), "a pick locks nothing");
        assert!(DELIVERIES
            .claim_sql()
            .contains("q.ctid = ANY ($3::text[]::tid[])"));
        // The outbox records a takeover as ambiguity.
        assert!(OUTBOX
            .claim_sql()
            .contains("ambiguous = q.ambiguous OR due.reclaimed"));
    }
}
