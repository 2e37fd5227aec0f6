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
            let store = Store::connect(&database)?;
            for entry in store.outbox_entries(dead, limit).await? {
                println!("{}", serde_json::to_string(&entry)?);
            }
            Ok(())
        }
        OutboxCommand::Retry {
            transfer_id,
            database,
        } => {
            let store = Store::connect(&database)?;
            let id = Uuid::parse_str(&transfer_id)?;
            if store.retry_outbox(id).await? {
                println!("{id} is due again");
                Ok(())
            } else {
                anyhow::bail!("no dead outbox row for transfer {id}")
            }
        }
    }
}
