//! Operators and their console sessions.

use std::time::Duration;

use uuid::Uuid;

use super::{ConsoleStore, OperatorSession};
use crate::domain::{ConsoleSecret, ConsoleSecretHash};
use crate::store::StoreError;

impl ConsoleStore {
    /// Makes an operator and their token; only the token's hash is kept.
    pub async fn create_operator(&self, name: &str) -> Result<(Uuid, ConsoleSecret), StoreError> {
        let id = Uuid::now_v7();
        let token = ConsoleSecret::operator_token();
        let hash = token.hash();
        self.write
            .with_client(|client| async move {
                client
                    .execute(
                        "INSERT INTO operators (id, name, token_hash) VALUES ($1, $2, $3)",
                        &[&id, &name, &hash.0.as_slice()],
                    )
                    .await?;
                Ok(())
            })
            .await?;
        Ok((id, token))
    }

    /// Revokes a live operator token and ends its sessions at once; false
    /// when no live token matches.
    pub async fn revoke_operator(&self, hash: &ConsoleSecretHash) -> Result<bool, StoreError> {
        self.write
            .with_client(|mut client| async move {
                let tx = client.transaction().await?;
                let row = tx
                    .query_opt(
                        "UPDATE operators SET revoked_at = now() \
                         WHERE token_hash = $1 AND revoked_at IS NULL RETURNING id",
                        &[&hash.0.as_slice()],
                    )
                    .await?;
                let Some(row) = row else { return Ok(false) };
                let id: Uuid = row.get(0);
                tx.execute(
                    "DELETE FROM operator_sessions WHERE operator_id = $1",
                    &[&id],
                )
                .await?;
                tx.commit().await?;
                Ok(true)
            })
            .await
    }

    /// Opens a session for the operator holding `token`, for `ttl`; `None`
    /// when no live operator has it. Expired sessions are cleared on the way
    /// (a bounded number), so the table holds live ones and a few more.
    pub async fn sign_in(
        &self,
        token: &ConsoleSecretHash,
        session: &ConsoleSecretHash,
        csrf_token: &str,
        ttl: Duration,
    ) -> Result<Option<String>, StoreError> {
        self.write
            .with_client(|mut client| async move {
                let tx = client.transaction().await?;
                let Some(op) = tx
                    .query_opt(
                        "SELECT id, name FROM operators WHERE token_hash = $1 AND revoked_at IS NULL",
                        &[&token.0.as_slice()],
                    )
                    .await?
                else {
                    return Ok(None);
                };
                let (id, name): (Uuid, String) = (op.get(0), op.get(1));
                tx.execute(
                    "DELETE FROM operator_sessions WHERE secret_hash IN (\
                     SELECT secret_hash FROM operator_sessions WHERE expires_at < now() LIMIT 1000)",
                    &[],
                )
                .await?;
                tx.execute(
                    "INSERT INTO operator_sessions (secret_hash, operator_id, csrf_token, expires_at) \
                     VALUES ($1, $2, $3, now() + make_interval(secs => $4))",
                    &[&session.0.as_slice(), &id, &csrf_token, &ttl.as_secs_f64()],
                )
                .await?;
                tx.commit().await?;
                Ok(Some(name))
            })
            .await
    }

    /// The live session with this secret, of an operator not revoked.
    pub async fn session(
        &self,
        secret: &ConsoleSecretHash,
    ) -> Result<Option<OperatorSession>, StoreError> {
        self.write
            .with_client(|client| async move {
                let stmt = client
                    .prepare_cached(
                        "SELECT o.id, o.name, s.csrf_token, s.expires_at FROM operator_sessions s \
                         JOIN operators o ON o.id = s.operator_id \
                         WHERE s.secret_hash = $1 AND s.expires_at > now() AND o.revoked_at IS NULL",
                    )
                    .await?;
                Ok(client
                    .query_opt(&stmt, &[&secret.0.as_slice()])
                    .await?
                    .map(|r| OperatorSession {
                        operator_id: r.get(0),
                        operator_name: r.get(1),
                        csrf_token: r.get(2),
                        expires_at: r.get(3),
                    }))
            })
            .await
    }

    /// Ends a session.
    pub async fn sign_out(&self, secret: &ConsoleSecretHash) -> Result<(), StoreError> {
        self.write
            .with_client(|client| async move {
                client
                    .execute(
                        "DELETE FROM operator_sessions WHERE secret_hash = $1",
                        &[&secret.0.as_slice()],
                    )
                    .await?;
                Ok(())
            })
            .await
    }
}
