use super::ClientCommand;
use crate::domain::ApiKey;
use crate::store::Store;

pub async fn run(cmd: ClientCommand) -> anyhow::Result<()> {
    match cmd {
        ClientCommand::Create { name, database } => {
            let store = Store::connect(&database.resolve()?)?;
            store.migrate().await?;
            let (id, key) = store.create_client(&name).await?;
            // The one place an API key is ever shown: to its owner, once.
            println!(
                "{}",
                serde_json::json!({"client_id": id.0, "name": name, "api_key": key.expose_secret()})
            );
            Ok(())
        }
        ClientCommand::Revoke { key_file, database } => {
            let api_key = read_secret(key_file.as_deref(), "API key", "--key-file")?;
            let store = Store::connect(&database.resolve()?)?;
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
            } else {
                eprintln!(
                    "revoked; all {} serve processes confirmed they refuse it",
                    outcome.listeners
                );
            }
            Ok(())
        }
    }
}

/// A secret to revoke (`what`): the first line of `file` (given by
/// `flag`), or of standard input.
pub(super) fn read_secret(
    file: Option<&std::path::Path>,
    what: &str,
    flag: &str,
) -> anyhow::Result<String> {
    use std::io::BufRead;
    let mut line = String::new();
    match file {
        Some(path) => {
            let f = std::fs::File::open(path)
                .map_err(|e| anyhow::anyhow!("cannot read {flag} {}: {e}", path.display()))?;
            std::io::BufReader::new(f).read_line(&mut line)?;
        }
        None => {
            if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
                eprintln!("paste the {what} to revoke, then press Enter:");
            }
            std::io::stdin().lock().read_line(&mut line)?;
        }
    }
    let key = line.trim();
    if key.is_empty() {
        anyhow::bail!("no {what} given: pipe it on standard input or name a file with {flag}");
    }
    Ok(key.to_owned())
}
