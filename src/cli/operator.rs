use super::client::read_secret;
use super::OperatorCommand;
use crate::domain::ConsoleSecret;
use crate::store::Store;

pub async fn run(cmd: OperatorCommand) -> anyhow::Result<()> {
    match cmd {
        OperatorCommand::Create { name, database } => {
            let store = Store::connect(&database.resolve()?)?;
            store.migrate().await?;
            let (id, token) = store.console().create_operator(&name).await?;
            // The one place a token is ever shown: to its operator, once.
            println!(
                "{}",
                serde_json::json!({"operator_id": id, "name": name, "token": token.expose_secret()})
            );
            Ok(())
        }
        OperatorCommand::Revoke {
            token_file,
            database,
        } => {
            let token = read_secret(token_file.as_deref(), "operator token", "--token-file")?;
            let store = Store::connect(&database.resolve()?)?;
            if !store
                .console()
                .revoke_operator(&ConsoleSecret::from_presented(&token).hash())
                .await?
            {
                anyhow::bail!("no live operator token matches");
            }
            eprintln!("revoked; the operator's console sessions have ended");
            Ok(())
        }
    }
}
