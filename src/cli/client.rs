use super::ClientCommand;
use crate::domain::ApiKey;
use crate::store::Store;

pub async fn run(cmd: ClientCommand) -> anyhow::Result<()> {
    match cmd {
        ClientCommand::Create { name, database } => {
            let store = Store::connect(&database)?;
            store.migrate().await?;
            let (id, key) = store.create_client(&name).await?;
            // The one place an API key is ever shown: to its owner, once.
            println!(
                "{}",
                serde_json::json!({"client_id": id.0, "name": name, "api_key": key.expose_secret()})
            );
            Ok(())
        }
        ClientCommand::Revoke { api_key, database } => {
            let store = Store::connect(&database)?;
            let outcome = store
                .revoke_api_key(&ApiKey::from_presented(&api_key).hash())
                .await?;
            if !outcome.revoked {
                anyhow::bail!("no live API key matches");
            }
            if outcome.confirmed < outcome.listeners {
                eprintln!(
                    "revoked; {} of {} serve processes confirmed within --db-timeout; the others \
                     forget cached keys after --auth-cache-ttl",
                    outcome.confirmed, outcome.listeners
                );
            }
            Ok(())
        }
    }
}
