use std::collections::HashSet;

use uuid::Uuid;

use super::notify::listener_name;
use super::{Store, StoreError};
use crate::domain::{ApiKey, ApiKeyHash, ClientId};

/// Revocations are announced here (payload: the key hash in hex), so every
/// `serve` process drops the key from its authentication cache at once.
pub const REVOKED_CHANNEL: &str = "payrail_revoked";
/// Each process answers a revocation here (same payload) once it has.
pub const REVOKED_ACK_CHANNEL: &str = "payrail_revoked_ack";

/// Who is calling, by the hash of the API key.
const AUTHENTICATE: &str =
    "SELECT client_id FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL";

impl Store {
    /// Opens every connection of the authentication pool and prepares the
    /// lookup on each (see `Store::warm_pool`): a fresh process's first
    /// requests, each of a key not yet cached, otherwise wait on them.
    /// Returns how many are open.
    pub async fn warm_auth(&self) -> Result<usize, StoreError> {
        self.auth_pool.warm(usize::MAX, &[AUTHENTICATE]).await
    }

    /// Creates a client and its first API key; returns the key once, in clear.
    pub async fn create_client(&self, name: &str) -> Result<(ClientId, ApiKey), StoreError> {
        let id = ClientId(Uuid::now_v7());
        let key = ApiKey::generate();
        let hash = key.hash();
        self.with_client(|mut client| async move {
            let tx = client.transaction().await?;
            tx.execute(
                "INSERT INTO clients (id, name) VALUES ($1, $2)",
                &[&id.0, &name],
            )
            .await?;
            tx.execute(
                "INSERT INTO api_keys (key_hash, client_id) VALUES ($1, $2)",
                &[&hash.0.as_slice(), &id.0],
            )
            .await?;
            tx.commit().await?;
            Ok(())
        })
        .await?;
        Ok((id, key))
    }

    /// The client owning an unrevoked key with this hash.
    pub async fn authenticate(&self, hash: &ApiKeyHash) -> Result<Option<ClientId>, StoreError> {
        self.with_auth_client(|client| async move {
            let stmt = client.prepare_cached(AUTHENTICATE).await?;
            let row = client.query_opt(&stmt, &[&hash.0.as_slice()]).await?;
            Ok(row.map(|r| ClientId(r.get(0))))
        })
        .await
    }

    /// Revokes a key and waits until every `serve` process listening on
    /// this database has dropped it from its authentication cache, so that
    /// the key is refused everywhere once this returns ("at once").
    pub async fn revoke_api_key(&self, hash: &ApiKeyHash) -> Result<Revocation, StoreError> {
        let payload = hex::encode(hash.0);
        let payload = payload.as_str();
        let mut acks = self.listener().subscribe(REVOKED_ACK_CHANNEL).await?;
        let (revoked, listeners) = self
            .with_client(|mut client| async move {
                // Named before the commit, by their backends' process ids:
                // each of them hears the notification and acknowledges it
                // from that same backend, so an acknowledgement counts only
                // for the listener that sent it, and only once. One that
                // connects later clears its whole cache when it starts
                // listening.
                let listeners: HashSet<i32> = client
                    .query(
                        "SELECT pid FROM pg_stat_activity \
                         WHERE datname = current_database() AND application_name = $1",
                        &[&listener_name(REVOKED_CHANNEL)],
                    )
                    .await?
                    .iter()
                    .map(|r| r.get(0))
                    .collect();
                let tx = client.transaction().await?;
                let n = tx
                    .execute(
                        "UPDATE api_keys SET revoked_at = now() WHERE key_hash = $1 AND revoked_at IS NULL",
                        &[&hash.0.as_slice()],
                    )
                    .await?;
                if n == 1 {
                    tx.execute("SELECT pg_notify($1, $2)", &[&REVOKED_CHANNEL, &payload])
                        .await?;
                }
                tx.commit().await?;
                Ok((n == 1, listeners))
            })
            .await?;
        let mut confirmed = HashSet::new();
        if revoked {
            let wait = async {
                while confirmed.len() < listeners.len() {
                    match acks.recv().await {
                        Some((pid, heard)) if heard == payload && listeners.contains(&pid) => {
                            confirmed.insert(pid);
                        }
                        Some(_) => {}
                        None => break,
                    }
                }
            };
            let _ = tokio::time::timeout(self.op_timeout, wait).await;
        }
        assert!(confirmed.is_subset(&listeners));
        Ok(Revocation {
            revoked,
            listeners: listeners.len() as u64,
            confirmed: confirmed.len() as u64,
        })
    }
}

/// What [`Store::revoke_api_key`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Revocation {
    /// A live key had this hash and is now revoked.
    pub revoked: bool,
    /// `serve` processes listening for revocations when it committed.
    pub listeners: u64,
    /// Of those, how many confirmed within `--db-timeout` that their cache
    /// no longer holds the key. Any other stops trusting its cache when its
    /// listener connection is lost and forgets entries after their TTL.
    pub confirmed: u64,
}
