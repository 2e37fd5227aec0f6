use uuid::Uuid;

use super::{Store, StoreError};
use crate::domain::{ApiKey, ApiKeyHash, ClientId};

impl Store {
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
        self.with_client(|client| async move {
            let stmt = client
                .prepare_cached(
                    "SELECT client_id FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL",
                )
                .await?;
            let row = client.query_opt(&stmt, &[&hash.0.as_slice()]).await?;
            Ok(row.map(|r| ClientId(r.get(0))))
        })
        .await
    }

    /// Revokes a key; false when no live key has this hash.
    pub async fn revoke_api_key(&self, hash: &ApiKeyHash) -> Result<bool, StoreError> {
        self.with_client(|client| async move {
            let n = client
                .execute(
                    "UPDATE api_keys SET revoked_at = now() WHERE key_hash = $1 AND revoked_at IS NULL",
                    &[&hash.0.as_slice()],
                )
                .await?;
            Ok(n == 1)
        })
        .await
    }
}
