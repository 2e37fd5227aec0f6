//! All SQL of the engine lives here (and in `migrations/`). Every statement is
//! parameterized, every operation is bounded by `--db-timeout`, and callers
//! get [`StoreError`], never a driver type.

mod clients;
pub mod console;
mod db;
mod keys;
mod migrate;
pub mod notifications;
mod notify;
pub mod outbox;
pub mod polls;
pub mod queue;
pub mod returns;
pub mod status;
mod transfers;
mod tx;
pub mod webhooks;

use std::future::Future;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;

use crate::config::DatabaseConfig;

pub use clients::{Revocation, REVOKED_ACK_CHANNEL, REVOKED_CHANNEL};
pub use console::ConsoleStore;
pub use db::Db;
pub use keys::{
    FlushLimits, KeyStore, KeyWrite, LiveAnswer, OutboxHandoff, StoredAnswer, WriteOutcome,
    CREATED_STATUS,
};
pub use notifications::NotificationStore;
pub use notify::{Heard, Listener};
pub use outbox::OutboxStore;
pub use polls::PollStore;
pub use returns::ReturnStore;
pub use transfers::TransferPage;
pub use webhooks::{DeliveryStore, EndpointStore, EventStore};

/// Why a database operation did not complete. Callers answer all of these
/// with `503 unavailable`: in each case nothing was stored.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No connection could be had from the pool.
    #[error("no database connection: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    /// Postgres answered with an error or the connection broke.
    #[error("database error: {}", db_detail(.0))]
    Db(#[from] tokio_postgres::Error),
    /// The operation ran past `--db-timeout`.
    #[error("database operation timed out after {0:?}")]
    Timeout(Duration),
    /// A migration failed.
    #[error("migration failed: {0}")]
    Migration(#[from] refinery::Error),
    /// A stored row broke an invariant that only valid writes could have kept.
    #[error("corrupt row: {0}")]
    Corrupt(String),
    /// The connection settings are unusable.
    #[error("bad database configuration: {0}")]
    Config(String),
}

impl StoreError {
    /// True when Postgres refused something about particular rows (a lock
    /// held elsewhere past the lock timeout, a deadlock, a value or a
    /// constraint it rejects) rather than failing as a whole: retrying a
    /// smaller batch can then succeed for the rows that were not at fault.
    pub fn is_row_specific(&self) -> bool {
        let Self::Db(e) = self else { return false };
        let Some(code) = e.code() else { return false };
        let code = code.code();
        code.starts_with("22") || code.starts_with("23") || code == "55P03" || code == "40P01"
    }

    /// True when a lock held by another transaction outlasted the lock
    /// timeout.
    pub fn is_lock_timeout(&self) -> bool {
        matches!(self, Self::Db(e) if e.code() == Some(&tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE))
    }

    /// True for a lock timeout on a lock that is not a row's: no other
    /// transaction is writing these keys; the wait was for a table-level
    /// lock, or for the lock that serializes extending a table by a page
    /// (held through the holder's disk writes, so a slow WAL write can
    /// stall it past the lock timeout). Postgres names the tuple in the
    /// error's context when it waited for a row ("while inserting index
    /// tuple (0,7) in relation ..."); a server whose messages are
    /// translated never matches, so its row waits count as such a lock too.
    pub fn is_lock_timeout_off_rows(&self) -> bool {
        let Self::Db(e) = self else { return false };
        self.is_lock_timeout()
            && !e
                .as_db_error()
                .and_then(|db| db.where_())
                .is_some_and(|context| context.contains("tuple"))
    }
}

/// The server's own message when there is one: the driver's `Display` says
/// only "db error" and keeps Postgres's reason in its source.
fn db_detail(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} ({})", db.message(), db.code().code()),
        None => e.to_string(),
    }
}

/// Most rows any figure of `/metrics` or the console's live view counts:
/// past it the figure reads this number, meaning "at least". Those figures
/// are read every few seconds by every process; a backlog larger than this
/// is already far past every other bound, and counting it whole would cost
/// a scan of the backlog each time (about 10 ms per 100 000 rows of an
/// index), growing with the very outage that made the backlog.
pub const FIGURE_ROWS_MAX: i64 = 100_000;

/// `count(*)` of the rows `from_where` (a `FROM ... WHERE ...`) selects, up
/// to `$limit`: a scalar subquery reading at most that many rows.
pub(crate) fn capped_count(from_where: &str, limit: &str) -> String {
    format!("(SELECT count(*) FROM (SELECT 1 {from_where} LIMIT {limit}) capped)")
}

/// Handle to Postgres: a bounded connection pool plus the operation timeout.
/// Cheap to clone; every actor holds one.
#[derive(Clone)]
pub struct Store {
    /// The write pool: every handle made from this `Store` gets it.
    pool: Db,
    /// A small pool of its own for who-is-calling lookups, so that a flood
    /// of unknown API keys can exhaust only it, never the connections that
    /// write transfers.
    auth_pool: Db,
    /// One connection for readiness alone: neither a flood of unknown API
    /// keys nor busy writers can make a healthy process look unready to
    /// its load balancer.
    ready_pool: Db,
    /// For the relay's LISTEN connection, which must not come from the pool.
    pg_config: tokio_postgres::Config,
    op_timeout: Duration,
    connect_timeout: Duration,
}

/// A pool of at most `size` connections whose waits, opening and recycling
/// are each bounded.
fn build_pool(
    pg: &tokio_postgres::Config,
    size: usize,
    op_timeout: Duration,
    connect_timeout: Duration,
) -> Result<Pool, StoreError> {
    let manager = Manager::from_config(
        pg.clone(),
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size)
        .wait_timeout(Some(op_timeout))
        .create_timeout(Some(connect_timeout))
        .recycle_timeout(Some(connect_timeout))
        .runtime(Runtime::Tokio1)
        .build()
        .map_err(|e| StoreError::Config(e.to_string()))
}

impl Store {
    /// Builds the pool. Connections are opened lazily, so this succeeds while
    /// Postgres is down and the pool recovers by itself once it is back.
    pub fn connect(cfg: &DatabaseConfig) -> Result<Self, StoreError> {
        let mut pg: tokio_postgres::Config = cfg
            .database_url
            .parse()
            .map_err(|e| StoreError::Config(format!("{e}")))?;
        pg.connect_timeout(cfg.db_connect_timeout);
        pg.application_name("payrail");
        // The server gives up too, so an abandoned statement does not hold
        // locks; and a transaction whose process froze between two statements
        // (SIGSTOP, a VM pause) is ended by Postgres, which frees its row locks
        // for everyone else.
        //
        // No JIT: every statement here reads a few rows, but the planner
        // estimates a LATERAL's parameterized LIMIT at a tenth of the table,
        // and past `jit_above_cost` it compiled the fair claim's pick for
        // 100-300 ms of a pick that runs in under 1 ms (tests/pick_cost.rs).
        pg.options(format!(
            "-c statement_timeout={} -c idle_in_transaction_session_timeout={} -c jit=off",
            cfg.db_timeout.as_millis(),
            cfg.db_timeout.as_millis()
        ));
        let connect_timeout = cfg.db_connect_timeout;
        let db = |size| {
            build_pool(&pg, size, cfg.db_timeout, connect_timeout)
                .map(|p| Db::new(p, cfg.db_timeout))
        };
        Ok(Self {
            pool: db(cfg.db_pool_size)?,
            auth_pool: db(cfg.auth_db_pool_size)?,
            ready_pool: db(1)?,
            pg_config: pg,
            op_timeout: cfg.db_timeout,
            connect_timeout,
        })
    }

    /// The same database through a write pool of its own, of `size`
    /// connections, for an actor that runs on a thread of its own.
    ///
    /// Why: a connection's I/O is driven by a task on the thread that opened
    /// it. In the shared pool that is whichever thread first needed one (the
    /// main thread at startup, an HTTP worker), so each statement of a shard
    /// hopped to that thread and back: two more wake-ups per round trip, on
    /// a thread the scheduler may not run soon. A pool used only from one
    /// thread opens, and so drives, its connections there.
    pub fn with_own_pool(&self, size: usize) -> Result<Self, StoreError> {
        assert!(size > 0, "a pool of no connections can run nothing");
        Ok(Self {
            pool: Db::new(
                build_pool(&self.pg_config, size, self.op_timeout, self.connect_timeout)?,
                self.op_timeout,
            ),
            ..self.clone()
        })
    }

    /// The idempotency keys' statements (the shards' flushes, the reaper).
    pub fn keys(&self) -> KeyStore {
        KeyStore(self.pool.clone())
    }

    /// The outbox's statements (the relay, `payrail outbox`).
    pub fn outbox(&self) -> OutboxStore {
        OutboxStore(self.pool.clone())
    }

    /// Status lookups of `processing` transfers (the poller, `payrail
    /// transfers stuck`).
    pub fn polls(&self) -> PollStore {
        PollStore(self.pool.clone())
    }

    /// Return watches: the return lookups' queue.
    pub fn returns(&self) -> ReturnStore {
        ReturnStore(self.pool.clone())
    }

    /// Provider notifications' statements (their endpoint, the reaper).
    pub fn notifications(&self) -> NotificationStore {
        NotificationStore(self.pool.clone())
    }

    /// Webhook deliveries' statements (the delivery worker).
    pub fn deliveries(&self) -> DeliveryStore {
        DeliveryStore(self.pool.clone())
    }

    /// Webhook endpoints' statements (the API, the reaper).
    pub fn endpoints(&self) -> EndpointStore {
        EndpointStore(self.pool.clone())
    }

    /// Webhook events' statements (the API, the reaper).
    pub fn events(&self) -> EventStore {
        EventStore(self.pool.clone())
    }

    /// The operator console's statements.
    pub fn console(&self) -> ConsoleStore {
        ConsoleStore {
            write: self.pool.clone(),
        }
    }

    /// Runs one operation on a connection of the write pool within `--db-timeout`.
    async fn with_client<T, F, Fut>(&self, op: F) -> Result<T, StoreError>
    where
        F: FnOnce(Object) -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        self.pool.with_client(op).await
    }

    /// Like `with_client`, on the authentication pool.
    async fn with_auth_client<T, F, Fut>(&self, op: F) -> Result<T, StoreError>
    where
        F: FnOnce(Object) -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        self.auth_pool.with_client(op).await
    }

    /// True when Postgres answers and the schema is one this build can run
    /// against.
    pub async fn is_ready(&self) -> bool {
        matches!(self.schema_is_runnable().await, Ok(true))
    }
}
