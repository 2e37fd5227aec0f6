//! One pool and the bound on every operation on it: all that a store
//! handle (`KeyStore`, `OutboxStore`, ...) owns. A handle made from a
//! `Store` with a pool of its own (`Store::with_own_pool`) uses that pool
//! alone, and cannot reach the process's others.

use std::future::Future;
use std::time::Duration;

use deadpool_postgres::{Object, Pool};

use super::StoreError;

/// A pool, and `--db-timeout` for each operation on it.
#[derive(Clone)]
pub struct Db {
    pool: Pool,
    op_timeout: Duration,
}

impl Db {
    /// `pool`, each operation on it bounded by `op_timeout`.
    pub(super) fn new(pool: Pool, op_timeout: Duration) -> Self {
        assert!(!op_timeout.is_zero(), "an operation may take some time");
        Self { pool, op_timeout }
    }

    /// The pool itself (migrations hold one connection for their run).
    pub(super) fn pool(&self) -> &Pool {
        &self.pool
    }

    /// One operation on a connection of the pool, the pool wait included,
    /// within `--db-timeout`.
    pub(super) async fn with_client<T, F, Fut>(&self, op: F) -> Result<T, StoreError>
    where
        F: FnOnce(Object) -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let run = async {
            let client = self.pool.get().await?;
            op(client).await
        };
        tokio::time::timeout(self.op_timeout, run)
            .await
            .map_err(|_| StoreError::Timeout(self.op_timeout))?
    }

    /// Opens up to `connections` connections of the pool at once (at most
    /// its size) and prepares `statements` on each, within `--db-timeout`;
    /// returns how many are open.
    ///
    /// Why: a pool opens connections as work first needs them, so a fresh
    /// process's first burst waits on new server processes (a fork, the
    /// login, the catalog read anew by each statement's first parse) while
    /// the work queues behind it. Statements are prepared under the same
    /// text the work uses, so the connection's statement cache has them.
    pub(super) async fn warm(
        &self,
        connections: usize,
        statements: &[&str],
    ) -> Result<usize, StoreError> {
        let wanted = connections.min(self.pool.status().max_size);
        let run = async {
            // Held together, so each is a connection of its own.
            let clients =
                futures::future::try_join_all((0..wanted).map(|_| self.pool.get())).await?;
            futures::future::try_join_all(clients.iter().map(|client| async move {
                for sql in statements {
                    client.prepare_cached(sql).await?;
                }
                Ok::<_, StoreError>(())
            }))
            .await?;
            Ok::<_, StoreError>(clients.len())
        };
        let opened = tokio::time::timeout(self.op_timeout, run)
            .await
            .map_err(|_| StoreError::Timeout(self.op_timeout))??;
        assert!(opened <= wanted, "no more connections than asked for");
        Ok(opened)
    }
}
