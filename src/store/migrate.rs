use super::{Store, StoreError};

refinery::embed_migrations!("migrations");

/// Any constant will do; it only has to be the same in every process.
const MIGRATION_LOCK_ID: i64 = 0x7061_7972_6169_6c00;

impl Store {
    /// Applies pending migrations. An advisory lock serializes processes that
    /// start at the same time, since refinery itself does not lock.
    pub async fn migrate(&self) -> Result<(), StoreError> {
        let mut client = self.pool.pool().get().await?;
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

    /// True when this build can run against the schema: every migration it
    /// knows is applied, and any newer one was written by a newer build.
    /// Migrations only ever expand the schema in a way the release before
    /// them still runs on (a column it does not write is nullable or has a
    /// default; a column or table it reads is dropped one release later), so
    /// during a rolling deploy the first new engine migrates and the older
    /// ones stay ready.
    pub async fn schema_is_runnable(&self) -> Result<bool, StoreError> {
        let known = newest_known_migration();
        self.ready_pool
            .with_client(|client| async move {
                let row = client
                    .query_opt("SELECT MAX(version) FROM refinery_schema_history", &[])
                    .await?;
                let applied: Option<i32> = row.and_then(|r| r.get(0));
                Ok(runnable(applied, known))
            })
            .await
    }
}

/// The newest migration this build carries.
fn newest_known_migration() -> u32 {
    migrations::runner()
        .get_migrations()
        .iter()
        .map(|m| m.version())
        .max()
        .expect("the build carries its migrations")
}

/// Whether a build whose newest migration is `known` runs on a database
/// whose newest applied one is `applied`.
fn runnable(applied: Option<i32>, known: u32) -> bool {
    applied.and_then(|v| u32::try_from(v).ok()) >= Some(known)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_build_runs_on_its_own_schema_and_on_newer_ones_only() {
        assert!(runnable(Some(7), 7));
        assert!(runnable(Some(8), 7), "a newer engine migrated first");
        assert!(!runnable(Some(6), 7), "its own migrations are missing");
        assert!(!runnable(None, 7), "nothing applied");
        assert!(newest_known_migration() >= 7);
    }
}
