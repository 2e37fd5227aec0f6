//! `payrail dev`: the whole engine on one machine, for a first look.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::Args;

use super::dev_state::{self, DevState};
use super::signals;
use crate::domain::webhook::{
    AddressPolicy, EndpointUrl, WebhookSecret, ENDPOINTS_PER_CLIENT_DEFAULT,
};
use crate::domain::{ApiKey, ClientId};
use crate::pgcluster::{PgCluster, StopMode};
use crate::sim::SimArgs;
use crate::startup::Application;
use crate::store::Store;
use crate::webhook::sink::SinkArgs;

/// Flags of `payrail dev`.
#[derive(Debug, Args)]
pub struct DevArgs {
    /// Where the private Postgres cluster and the demo client are kept
    /// across runs.
    #[arg(long, env = "PAYRAIL_DEV_DATA_DIR", default_value = ".payrail-dev")]
    pub data_dir: PathBuf,
    /// Use this Postgres instead of a private cluster.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<String>,
    /// Address of the API.
    #[arg(long, env = "PAYRAIL_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Address of provider-sim.
    #[arg(long, env = "PAYRAIL_SIM_LISTEN", default_value = "127.0.0.1:9090")]
    pub sim_listen: SocketAddr,
    /// Address of the webhook sink that receives the demo client's webhooks.
    #[arg(long, env = "PAYRAIL_SINK_LISTEN", default_value = "127.0.0.1:9191")]
    pub sink_listen: SocketAddr,
}

pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    if let Some(other) = dev_state::running(&args.data_dir) {
        anyhow::bail!(
            "payrail dev is already running from {} (pid {}), API at {}; stop it first \
             (Ctrl-C in its terminal, or `kill {}`)",
            args.data_dir.display(),
            other.pid.unwrap_or_default(),
            other.api_url,
            other.pid.unwrap_or_default()
        );
    }
    let cluster = match &args.database_url {
        Some(_) => None,
        None => Some(start_cluster(args.data_dir.clone()).await?),
    };
    let result = serve(&args, cluster.as_ref()).await;
    if let Some(cluster) = cluster {
        eprintln!("postgres: stopping");
        tokio::task::spawn_blocking(move || cluster.stop(StopMode::Fast)).await??;
    }
    // Not running any more; the demo client stays for the next run.
    if let Some(mut state) = dev_state::load(&args.data_dir) {
        state.pid = None;
        let _ = dev_state::save(&args.data_dir, &state);
    }
    result
}

/// Starts the private cluster, first stopping one that an earlier
/// `payrail dev` left running (its terminal was closed, it was killed).
async fn start_cluster(data_dir: PathBuf) -> anyhow::Result<PgCluster> {
    tokio::task::spawn_blocking(move || -> anyhow::Result<PgCluster> {
        let cluster = PgCluster::init(&data_dir, 0, true)?;
        if let Some(pid) = dev_state::postmaster(&data_dir) {
            eprintln!(
                "postgres: a server left running in {} by an earlier payrail dev (pid {pid}); stopping it",
                data_dir.display()
            );
            cluster.stop(StopMode::Fast)?;
        }
        cluster.start()?;
        eprintln!(
            "postgres: private cluster in {} on port {}",
            data_dir.display(),
            cluster.port()
        );
        Ok(cluster)
    })
    .await?
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
    let sim = crate::sim::start(sim_args(args.sim_listen))
        .await
        .map_err(|e| {
            crate::startup::bind_error(e, args.sim_listen, "--sim-listen", "PAYRAIL_SIM_LISTEN")
        })?;
    let listen = args.listen.to_string();
    let config = crate::cli::serve_config([
        "--database-url",
        &database_url,
        "--listen",
        &listen,
        "--provider-url",
        &sim.url(),
        // The sink listens on loopback.
        "--webhook-allow-private",
        "--console",
    ])?;
    let app = Application::build(config).await?;
    let api_url = format!("http://127.0.0.1:{}", app.port());
    let (client, api_key) = demo_client(app.store(), &args.data_dir).await?;
    let sink_url = format!("http://{}/webhooks", args.sink_listen);
    let (endpoint_id, secret) =
        demo_endpoint(app.store(), client, &sink_url, &args.data_dir).await?;
    let sink = crate::webhook::sink::start(SinkArgs {
        listen: args.sink_listen.to_string(),
        secret: secret.clone(),
        fail_rate: 0.0,
        seed: None,
        latency_ms: 0,
        max_events: 100_000,
        print: true,
    })
    .await
    .map_err(|e| {
        crate::startup::bind_error(e, args.sink_listen, "--sink-listen", "PAYRAIL_SINK_LISTEN")
    })?;
    dev_state::save(
        &args.data_dir,
        &DevState {
            pid: Some(std::process::id()),
            database_url: database_url.clone(),
            api_url: api_url.clone(),
            demo_client_id: Some(client.0),
            demo_api_key: Some(api_key.clone()),
            webhook_endpoint_id: Some(endpoint_id),
            webhook_secret: Some(secret.encode()),
        },
    )?;
    print_welcome(
        &api_url,
        &sim.url(),
        &sink.url(),
        &api_key,
        &database_url,
        &args.data_dir,
    );
    signals::stop_gracefully_on_signals(app.handle(), || {});
    app.run_until_stopped().await?;
    sim.stop().await?;
    sink.stop().await?;
    Ok(())
}

/// The demo client's endpoint at the dev sink, and its secret: the one of
/// an earlier run while it is still registered, else a new one (replacing
/// any other endpoint of the demo client at that URL).
async fn demo_endpoint(
    store: &Store,
    client: ClientId,
    sink_url: &str,
    data_dir: &Path,
) -> anyhow::Result<(uuid::Uuid, WebhookSecret)> {
    let endpoints = store.endpoints().list(client).await?;
    if let Some(DevState {
        webhook_endpoint_id: Some(id),
        webhook_secret: Some(secret),
        ..
    }) = dev_state::load(data_dir)
    {
        let live = endpoints
            .iter()
            .any(|e| e.id == id && e.url == sink_url && e.disabled_at.is_none());
        if let (true, Ok(secret)) = (live, WebhookSecret::parse(&secret)) {
            return Ok((id, secret));
        }
    }
    for stale in endpoints.iter().filter(|e| e.url == sink_url) {
        store.endpoints().delete(client, stale.id).await?;
    }
    let url = EndpointUrl::parse(sink_url, AddressPolicy::AllowPrivate)
        .map_err(|e| anyhow::anyhow!("sink url {e}"))?;
    let secret = WebhookSecret::generate();
    let endpoint = store
        .endpoints()
        .create(
            client,
            &url,
            Some("payrail dev's webhook sink"),
            &secret,
            ENDPOINTS_PER_CLIENT_DEFAULT,
        )
        .await?;
    Ok((endpoint.id, secret))
}

/// The demo client of an earlier run while its key still works, else a new one.
async fn demo_client(store: &Store, data_dir: &Path) -> anyhow::Result<(ClientId, String)> {
    if let Some(DevState {
        demo_client_id: Some(id),
        demo_api_key: Some(key),
        ..
    }) = dev_state::load(data_dir)
    {
        if store
            .authenticate(&ApiKey::from_presented(&key).hash())
            .await?
            == Some(ClientId(id))
        {
            return Ok((ClientId(id), key));
        }
    }
    let (id, key) = store.create_client("demo").await?;
    Ok((id, key.expose_secret().to_owned()))
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

fn print_welcome(
    base: &str,
    sim_url: &str,
    sink_url: &str,
    api_key: &str,
    database_url: &str,
    data_dir: &Path,
) {
    println!(
        "\npayrail dev is running (Ctrl-C stops everything)\n\
         \n  API:           {base}\n  provider-sim:  {sim_url}   (watch it: curl {sim_url}/stats)\n  \
         webhook sink:  {sink_url}   (every final status of the demo client, signed; printed below as it arrives; curl {sink_url}/stats)\n  \
         database:      {database_url}\n  demo API key:  {api_key}   (kept in {dir}.json for the next run)\n\
         \nAdmin commands run from this folder use this database by themselves; elsewhere:\n\
         \n  export DATABASE_URL={database_url}\n\
         \nCreate a transfer (run it twice: the second answer is the replay):\n\
         \n  curl -i {base}/transfers \\\n    -H 'Authorization: Bearer {api_key}' \\\n    -H 'Content-Type: application/json' \\\n    -H 'Idempotency-Key: 5f1c2a4e-8b8e-4c55-9d1e-3f0a7c9b2d11' \\\n    -d '{{\"amount\": 1500, \"currency\": \"USD\", \"source_account\": \"acc_alice\", \"destination_account\": \"acc_bob\"}}'\n\
         \nA moment later the transfer succeeds at provider-sim and its signed webhook\n\
         (transfer.succeeded) is printed below. Events and their deliveries:\n\
         \n  curl {base}/events -H 'Authorization: Bearer {api_key}'\n\
         \nThe operator console: {base}/console, with a token from\n\
         \n  payrail operator create --name you\n",
        dir = data_dir.display()
    );
}
