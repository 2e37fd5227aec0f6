use super::{Store, StoreError};

refinery::embed_migrations!("migrations");

/// Any constant will do; it only has to be the same in every process.
const MIGRATION_LOCK_ID: i64 = 0x7061_7972_6169_6c00;

impl Store {
    /// Applies pending migrations. An advisory lock serializes processes that
    /// start at the same time, since refinery itself does not lock.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let mut client = self.pool.get().await?;
        client
            .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK_ID])
            .await?;
        let pg: &mut tokio_postgres::Client = &mut client;
        let result = migrations::runner().run_async(pg).await;
        client
            .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK_ID])
            .await?;
        result?;
        Ok(())
    }

    /// True when the newest applied migration is the newest this build knows.
    pub async fn schema_is_current(&self) -> Result<bool, StoreError> {
        let expected = migrations::runner()
            .get_migrations()
            .iter()
            .map(|m| m.version())
            .max();
        self.with_auth_client(|client| async move {
            let row = client
                .query_opt("SELECT MAX(version) FROM refinery_schema_history", &[])
                .await?;
            let applied: Option<i32> = row.and_then(|r| r.get(0));
            Ok(applied.map(|v| v as u32) == expected)
        })
        .await
    }
}
