//! The `payrail` command line: one subcommand per part of the engine.

mod admin_db;
mod client;
mod dev;
mod dev_state;
mod operator;
mod outbox;
mod signals;

use clap::{Parser, Subcommand};

use crate::config::ServeConfig;
use crate::sim::SimArgs;

pub use admin_db::AdminDatabase;

/// payrail: one payment intent, one transfer, one provider execution.
#[derive(Debug, Parser)]
#[command(name = "payrail", version, about)]
pub struct Cli {
    /// What to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Runs the HTTP API, key-shard actors, outbox relay and reaper.
    // Later flags win: the flags standing for old-named environment
    // variables come first (`args_with_renamed_env`).
    #[command(args_override_self = true)]
    Serve(Box<ServeConfig>),
    /// Applies pending database migrations and exits.
    Migrate(AdminDatabase),
    /// Manages clients (tenants) and their API keys.
    #[command(subcommand)]
    Client(ClientCommand),
    /// Manages operators of the console (`serve --console`) and their tokens.
    #[command(subcommand)]
    Operator(OperatorCommand),
    /// Inspects and retries outbox rows.
    #[command(subcommand)]
    Outbox(OutboxCommand),
    /// Inspects transfers the provider accepted and has not decided.
    #[command(subcommand)]
    Transfers(TransfersCommand),
    /// Runs provider-sim, a stand-in payment provider with fault injection.
    ProviderSim(SimArgs),
    /// Runs a webhook receiver that checks signatures, for tests and `payrail dev`.
    WebhookSink(crate::webhook::sink::SinkArgs),
    /// Runs everything on this machine for a newcomer: a private Postgres,
    /// provider-sim, migrations, a demo client and `serve` on 127.0.0.1:8080.
    Dev(dev::DevArgs),
}

impl Command {
    /// Serves until stopped (and logs at `info`), rather than doing one job.
    pub fn is_long_running(&self) -> bool {
        matches!(
            self,
            Self::Serve(_) | Self::ProviderSim(_) | Self::WebhookSink(_) | Self::Dev(_)
        )
    }
}

/// An error and its causes in one line, each said once: layers that repeat
/// their cause in their own message (the pool, the driver) would otherwise
/// print it two or three times.
pub fn describe(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

/// `payrail client …`
#[derive(Debug, Subcommand)]
pub enum ClientCommand {
    /// Creates a client and an API key; prints `{"client_id","name","api_key"}`.
    Create {
        /// Human-readable name of the client.
        #[arg(long)]
        name: String,
        #[command(flatten)]
        database: AdminDatabase,
    },
    /// Revokes an API key, read from standard input (its first line) or
    /// from --key-file, never from the command line, where process lists
    /// and shell history would keep it. Every serve process refuses it (401)
    /// once this returns.
    Revoke {
        /// Read the key from this file (its first line) instead of standard input.
        #[arg(long)]
        key_file: Option<std::path::PathBuf>,
        #[command(flatten)]
        database: AdminDatabase,
    },
}

/// `payrail operator …`
#[derive(Debug, Subcommand)]
pub enum OperatorCommand {
    /// Creates an operator and prints `{"operator_id","name","token"}`; the
    /// token is shown this once (only its SHA-256 is stored).
    Create {
        /// Who the operator is, as the audit names them.
        #[arg(long)]
        name: String,
        #[command(flatten)]
        database: AdminDatabase,
    },
    /// Revokes an operator token, read from standard input (its first
    /// line) or from --token-file, never from the command line; the
    /// operator's sessions end at once.
    Revoke {
        /// Read the token from this file (its first line) instead of standard input.
        #[arg(long)]
        token_file: Option<std::path::PathBuf>,
        #[command(flatten)]
        database: AdminDatabase,
    },
}

/// `payrail outbox …`
#[derive(Debug, Subcommand)]
pub enum OutboxCommand {
    /// Prints outbox rows as JSON lines, oldest first.
    List {
        /// Only dead-lettered rows.
        #[arg(long)]
        dead: bool,
        /// Most rows printed.
        #[arg(long, default_value_t = 100)]
        limit: i64,
        #[command(flatten)]
        database: AdminDatabase,
    },
    /// Puts a dead-lettered row back in line with a fresh attempt budget.
    Retry {
        /// The transfer id of the row.
        transfer_id: String,
        #[command(flatten)]
        database: AdminDatabase,
    },
}

/// `payrail transfers …`
#[derive(Debug, Subcommand)]
pub enum TransfersCommand {
    /// Prints, as JSON lines, transfers `processing` for longer than
    /// `--older-than` (longest first): accepted by the provider, with no
    /// outcome yet. They are still looked up; ask the provider about them.
    Stuck {
        /// How long `processing` counts as stuck (`serve`'s
        /// --provider-processing-max).
        #[arg(long, default_value = "7days", value_parser = humantime::parse_duration)]
        older_than: std::time::Duration,
        /// Most transfers printed.
        #[arg(long, default_value_t = 100)]
        limit: i64,
        #[command(flatten)]
        database: AdminDatabase,
    },
}

/// Runs a parsed command line to completion.
pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve(config) => {
            let app = crate::startup::Application::build(*config).await?;
            signals::stop_gracefully_on_signals(app.handle(), || {});
            app.run_until_stopped().await?;
            Ok(())
        }
        Command::Migrate(db) => {
            crate::store::Store::connect(&db.resolve()?)?
                .migrate()
                .await?;
            println!("migrations applied");
            Ok(())
        }
        Command::Client(cmd) => client::run(cmd).await,
        Command::Outbox(cmd) => outbox::run(cmd).await,
        Command::Operator(cmd) => operator::run(cmd).await,
        Command::Transfers(TransfersCommand::Stuck {
            older_than,
            limit,
            database,
        }) => {
            let store = crate::store::Store::connect(&database.resolve()?)?;
            let stuck = store.polls().stuck(older_than, limit).await?;
            if stuck.is_empty() {
                eprintln!(
                    "no transfer has been processing for longer than {}",
                    humantime::format_duration(older_than)
                );
            }
            for s in stuck {
                println!("{}", serde_json::to_string(&s)?);
            }
            Ok(())
        }
        Command::ProviderSim(args) => Ok(crate::sim::run(args).await?),
        Command::WebhookSink(args) => Ok(crate::webhook::sink::run(args).await?),
        Command::Dev(args) => dev::run(args).await,
    }
}

/// The process's arguments, with `serve`'s flags for old-named environment
/// variables put right after the subcommand, so that the command line's
/// own flags still win ([`crate::config::RENAMED_ENV`]).
pub fn args_with_renamed_env(
    args: impl IntoIterator<Item = std::ffi::OsString>,
) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = args.into_iter().collect();
    if args.get(1).is_some_and(|a| a == "serve") {
        let renamed = crate::config::renamed_env_flags(|name| std::env::var_os(name));
        args.splice(2..2, renamed);
    }
    args
}

/// A `ServeConfig` from flags, with every other value at its default; how
/// `payrail dev` and the tests configure the engine.
pub fn serve_config<I, S>(args: I) -> Result<ServeConfig, clap::Error>
where
    I: IntoIterator<Item = S>,
    S: Into<std::ffi::OsString> + Clone,
{
    // Later flags win, so callers can override a default they passed.
    #[derive(Parser)]
    #[command(args_override_self = true)]
    struct Only {
        #[command(flatten)]
        config: ServeConfig,
    }
    let renamed = crate::config::renamed_env_flags(|name| std::env::var_os(name));
    let argv = std::iter::once(std::ffi::OsString::from("serve"))
        .chain(renamed)
        .chain(args.into_iter().map(Into::into));
    Ok(Only::try_parse_from(argv)?.config)
}
