//! The database an admin command (`migrate`, `client`, `outbox`) works on.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::dev_state;
use crate::config::DatabaseConfig;

/// Which database to manage. Without `--database-url` or `DATABASE_URL`,
/// the database of the `payrail dev` stack running from this folder.
#[derive(Debug, Clone, Args)]
pub struct AdminDatabase {
    /// The database to manage, e.g. postgres://user@host:5432/payrail.
    /// Default: the database of the `payrail dev` running from this folder.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<String>,
    /// Where a running `payrail dev` keeps its state, to find its database.
    #[arg(long, env = "PAYRAIL_DEV_DATA_DIR", default_value = ".payrail-dev")]
    pub dev_data_dir: PathBuf,
    /// Bound on each database operation of the command.
    #[arg(long, env = "PAYRAIL_DB_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    pub db_timeout: Duration,
    /// Bound on opening the connection.
    #[arg(long, env = "PAYRAIL_DB_CONNECT_TIMEOUT", default_value = "2s", value_parser = humantime::parse_duration)]
    pub db_connect_timeout: Duration,
}

impl AdminDatabase {
    /// The connection settings, saying on stderr when the dev stack's
    /// database was chosen.
    pub fn resolve(&self) -> anyhow::Result<DatabaseConfig> {
        let database_url = match &self.database_url {
            Some(url) => url.clone(),
            None => match dev_state::running(&self.dev_data_dir) {
                Some(state) => {
                    eprintln!(
                        "payrail: no --database-url or DATABASE_URL; using the database of the payrail dev \
                         running from {} (pid {})",
                        self.dev_data_dir.display(),
                        state.pid.unwrap_or_default()
                    );
                    state.database_url
                }
                None => anyhow::bail!(
                    "no database: pass --database-url, set DATABASE_URL, or start `payrail dev` in this folder \
                     (the commands then use its database)"
                ),
            },
        };
        Ok(DatabaseConfig {
            database_url,
            db_pool_size: 2,
            auth_db_pool_size: 1,
            db_timeout: self.db_timeout,
            db_connect_timeout: self.db_connect_timeout,
        })
    }
}
