//! A transaction whose `BEGIN` travels with its first statements.
//!
//! tokio-postgres's `Client::transaction` sends `BEGIN` and waits for its
//! answer before anything else goes out: a round trip of its own, in which
//! the caller's thread and a Postgres backend each wake up once more for no
//! work. Sent in one pipeline with the statements that follow, it costs
//! nothing. (The driver writes requests in the order their futures are first
//! polled, so `BEGIN` still runs first.)

use deadpool_postgres::Object;

use super::StoreError;

/// A transaction on a pooled connection, begun with [`OpenTx::begin`] in
/// the same pipeline as its first statements.
///
/// Dropped before [`OpenTx::commit`] or [`OpenTx::rollback`] has finished
/// (an error on the way, the operation's timeout), it discards the
/// connection: returned to the pool, it would hand its open transaction to
/// the next user. Closing the connection makes Postgres roll it back.
pub struct OpenTx {
    client: Option<Object>,
}

impl OpenTx {
    /// Takes `client` for a transaction; poll [`OpenTx::begin`] first, then
    /// the transaction's first statements, together.
    pub fn new(client: Object) -> Self {
        Self {
            client: Some(client),
        }
    }

    /// Sends `BEGIN` and then `settings` (simple statements such as
    /// `SET LOCAL`, no parameters) in one message.
    pub async fn begin(&self, settings: &str) -> Result<(), tokio_postgres::Error> {
        self.client()
            .batch_execute(&format!("BEGIN; {settings}"))
            .await
    }

    /// The connection, for the statements of the transaction.
    pub fn client(&self) -> &Object {
        self.client
            .as_ref()
            .expect("the connection is held until commit or rollback")
    }

    /// Commits; the connection goes back to the pool once Postgres said so.
    pub async fn commit(mut self) -> Result<(), StoreError> {
        self.client().batch_execute("COMMIT").await?;
        // Only now is the connection outside any transaction.
        drop(self.client.take());
        Ok(())
    }

    /// Rolls back after a failed statement and returns the connection to the
    /// pool; if even that fails, the connection is discarded on drop.
    pub async fn rollback(mut self) {
        if self.client().batch_execute("ROLLBACK").await.is_ok() {
            drop(self.client.take());
        }
    }
}

impl Drop for OpenTx {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            // Out of the pool for good; dropping the client closes it.
            drop(Object::take(client));
        }
    }
}
