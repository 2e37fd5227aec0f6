use uuid::Uuid;

use super::OutboxCommand;
use crate::store::Store;

pub async fn run(cmd: OutboxCommand) -> anyhow::Result<()> {
    match cmd {
        OutboxCommand::List {
            dead,
            limit,
            database,
        } => {
            let store = Store::connect(&database.resolve()?)?;
            let entries = store.outbox().entries(dead, limit).await?;
            assert!(
                entries.len() as i64 <= limit
                    && (!dead || entries.iter().all(|e| e.dead_at.is_some())),
                "a list keeps to its limit, and --dead lists dead rows only"
            );
            if entries.is_empty() {
                eprintln!(
                    "{}",
                    if dead {
                        "no dead-lettered outbox rows"
                    } else {
                        "the outbox is empty: every transfer is settled"
                    }
                );
            }
            for entry in entries {
                println!("{}", serde_json::to_string(&entry)?);
            }
            Ok(())
        }
        OutboxCommand::Retry {
            transfer_id,
            database,
        } => {
            let id = Uuid::parse_str(transfer_id.trim()).map_err(|_| {
                anyhow::anyhow!("expected a transfer id (a UUID such as 0193a3c4-5e6f-7a8b-9c0d-1e2f3a4b5c6d), got {transfer_id:?}")
            })?;
            let store = Store::connect(&database.resolve()?)?;
            if store.outbox().retry(id, &cli_actor()).await? {
                println!("{id} is due again");
                Ok(())
            } else {
                anyhow::bail!("no dead outbox row for transfer {id}")
            }
        }
    }
}

/// Who runs this command, for the audit: the operating system's user as the
/// environment names it (`cli:` and the name; `cli:unknown` when unset).
fn cli_actor() -> String {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_else(|_| "unknown".to_owned());
    format!("cli:{user}")
}
