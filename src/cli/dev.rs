//! `payrail dev`: the whole engine on one machine, for a first look.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use crate::pgcluster::{PgCluster, StopMode};
use crate::sim::SimArgs;
use crate::startup::Application;

/// Flags of `payrail dev`.
#[derive(Debug, Args)]
pub struct DevArgs {
    /// Where the private Postgres cluster keeps its data (kept across runs).
    /// Ignored when DATABASE_URL is set.
    #[arg(long, env = "PAYRAIL_DEV_DATA_DIR", default_value = ".payrail-dev")]
    pub data_dir: PathBuf,
    /// Use this Postgres instead of a private cluster.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<String>,
    /// Address of the API.
    #[arg(long, env = "PAYRAIL_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Address of provider-sim.
    #[arg(long, default_value = "127.0.0.1:9090")]
    pub sim_listen: SocketAddr,
}

pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    let cluster = match &args.database_url {
        Some(_) => None,
        None => {
            let data_dir = args.data_dir.clone();
            let cluster = tokio::task::spawn_blocking(move || -> anyhow::Result<PgCluster> {
                let cluster = PgCluster::init(&data_dir, 0, true)?;
                cluster.start()?;
                Ok(cluster)
            })
            .await??;
            eprintln!(
                "postgres: private cluster in {} on port {}",
                args.data_dir.display(),
                cluster.port()
            );
            Some(cluster)
        }
    };
    let result = serve(&args, cluster.as_ref()).await;
    if let Some(cluster) = cluster {
        eprintln!("postgres: stopping");
        tokio::task::spawn_blocking(move || cluster.stop(StopMode::Fast)).await??;
    }
    result
}

async fn serve(args: &DevArgs, cluster: Option<&PgCluster>) -> anyhow::Result<()> {
    let database_url = match (&args.database_url, cluster) {
        (Some(url), _) => url.clone(),
        (None, Some(c)) => {
            ensure_database(&c.url("postgres"), "payrail").await?;
            c.url("payrail")
        }
        (None, None) => anyhow::bail!("no database"),
    };
    let sim = crate::sim::start(sim_args(args.sim_listen)).await?;
    let listen = args.listen.to_string();
    let config = crate::cli::serve_config([
        "--database-url",
        &database_url,
        "--listen",
        &listen,
        "--provider-url",
        &sim.url(),
    ])?;
    let app = Application::build(config).await?;
    let (_, key) = app.store().create_client("demo").await?;
    print_welcome(app.port(), &sim.url(), key.expose_secret());
    app.run_until_stopped().await?;
    Ok(())
}

fn sim_args(listen: SocketAddr) -> SimArgs {
    SimArgs {
        listen: listen.to_string(),
        ..SimArgs::default()
    }
}

/// Creates the database unless it exists (Postgres has no CREATE DATABASE IF NOT EXISTS).
async fn ensure_database(admin_url: &str, name: &str) -> anyhow::Result<()> {
    let (client, conn) = tokio_postgres::connect(admin_url, tokio_postgres::NoTls).await?;
    let driver = actix_web::rt::spawn(conn);
    let exists = client
        .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
        .await?;
    if exists.is_none() {
        // An identifier cannot be a bind parameter; `name` is our constant.
        client
            .batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .await?;
    }
    drop(client);
    let _ = driver.await;
    Ok(())
}

fn print_welcome(port: u16, sim_url: &str, api_key: &str) {
    let base = format!("http://127.0.0.1:{port}");
    println!(
        "\npayrail dev is running (Ctrl-C stops everything)\n\
         \n  API:          {base}\n  provider-sim: {sim_url}\n  demo API key: {api_key}\n\
         \nCreate a transfer (run it twice: the second answer is the replay):\n\
         \n  curl -i {base}/transfers \\\n    -H 'Authorization: Bearer {api_key}' \\\n    -H 'Content-Type: application/json' \\\n    -H 'Idempotency-Key: 5f1c2a4e-8b8e-4c55-9d1e-3f0a7c9b2d11' \\\n    -d '{{\"amount\": 1500, \"currency\": \"USD\", \"source_account\": \"acc_alice\", \"destination_account\": \"acc_bob\"}}'\n"
    );
}
