//! Builds and runs `payrail serve`. `main`, `payrail dev` and the tests all
//! start the engine through [`Application::build`], the same way.

use std::net::TcpListener;
use std::sync::Arc;

use actix::{Addr, Arbiter};
use actix_web::dev::{Server, ServerHandle};
use actix_web::{middleware::from_fn, web, App, HttpServer};

use crate::api::{self, AppState, AuthCache, ClientRateLimiter, ReadinessCache};
use crate::config::ServeConfig;
use crate::console::ConsoleState;
use crate::reaper::{ReapedStores, Reaper};
use crate::relay::{LagGate, RelayHandle, RelayNudge, RelayOutlet};
use crate::shard::{ShardLimits, ShardRouter};
use crate::started::{Parts, Started};
use crate::store::{Store, REVOKED_ACK_CHANNEL, REVOKED_CHANNEL};
use crate::telemetry;
use crate::webhook::WebhookLimits;

/// A built, bound, not yet awaited engine.
pub struct Application {
    port: u16,
    server: Option<Server>,
    handle: ServerHandle,
    reaper: Addr<Reaper>,
    store: Store,
    /// Every part on a thread of its own: drained, then stopped (also when
    /// this is dropped).
    parts: Parts,
    /// `--shutdown-grace`.
    shutdown_grace: std::time::Duration,
}

impl Application {
    /// Connects, migrates, starts the actors and binds the listener. Must be
    /// called inside an actix `System` (as `#[actix_web::main]` and
    /// `#[actix_web::test]` provide).
    pub async fn build(config: ServeConfig) -> anyhow::Result<Self> {
        config.validate().map_err(anyhow::Error::msg)?;
        crate::relay::check(&config).map_err(anyhow::Error::msg)?;
        // First, so that a busy port is said plainly before anything starts.
        let listener = TcpListener::bind(config.listen)
            .map_err(|e| bind_error(e, config.listen, "--listen", "PAYRAIL_LISTEN"))?;
        // Before any actor registers its metrics, so their handles are live.
        let metrics = telemetry::metrics_handle();
        let store = Store::connect(&config.database)?;
        store.migrate().await?;
        warm_auth(&store).await;

        let mut parts = Parts::default();
        // The relay first: the shards hand it the rows they claim.
        let relay = crate::relay::start(&config, &store).await?;
        let shards = start_shards(&config, &store, relay.as_ref(), &mut parts).await?;
        parts.extend(relay.map(|r| r.part));
        parts.push(start_webhooks(&config, &store)?);
        let reaper_stores = ReapedStores::of(&store);
        let (reaper, reaper_arbiter) = crate::reaper::start((&config).into(), reaper_stores);
        parts.push(Started::thread("reaper", reaper_arbiter));
        let outcomes = crate::outcome::start(&config, &store)?;
        parts.extend(outcomes.parts);
        let auth_cache = Arc::new(AuthCache::new(
            config.auth_cache,
            config.auth_cache_ttl,
            config.auth_negative_cache,
            config.auth_negative_cache_ttl,
        ));
        parts.push(listen_for_revocations(&store, auth_cache.clone()));

        let state = api_state(
            &config,
            &store,
            auth_cache,
            shards,
            outcomes.intake,
            metrics,
        );
        // Off unless asked for: the console is a separate trust domain.
        let console = (config.console.console).then(|| ConsoleState::new(&config, &store));
        let port = listener.local_addr()?.port();
        let server = serve(&config, listener, state, console.map(web::Data::new))?;
        tracing::info!(
            port,
            shards = config.shards,
            parts = parts.len(),
            "payrail serving"
        );
        Ok(Self {
            port,
            handle: server.handle(),
            server: Some(server),
            reaper,
            store,
            parts,
            shutdown_grace: config.shutdown_grace,
        })
    }

    /// The port the API listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops the HTTP server (the future of `run_until_stopped` then ends).
    pub fn handle(&self) -> ServerHandle {
        self.handle.clone()
    }

    /// The reaper actor, to trigger a tick.
    pub fn reaper(&self) -> Addr<Reaper> {
        self.reaper.clone()
    }

    /// The store this engine uses.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Serves until stopped, then drains the parts that hold work (the
    /// relay and the poller: no new claims, the calls in flight finish and
    /// their outcomes are recorded; then webhook deliveries), within
    /// `--shutdown-grace`; the threads stop when this returns.
    pub async fn run_until_stopped(mut self) -> std::io::Result<()> {
        let served = match self.server.take() {
            Some(server) => server.await,
            None => Ok(()),
        };
        if !self.parts.drain(self.shutdown_grace).await {
            tracing::warn!(
                grace = ?self.shutdown_grace,
                "not drained within --shutdown-grace; rows still held are taken over after their leases (outbox rows are looked up first)"
            );
        }
        served
    }
}

/// What every API handler reads.
fn api_state(
    config: &ServeConfig,
    store: &Store,
    auth_cache: Arc<AuthCache>,
    shards: ShardRouter,
    notifications: Option<crate::outcome::notifications::Intake>,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
) -> web::Data<AppState> {
    web::Data::new(AppState {
        store: store.clone(),
        auth_cache,
        shards,
        rate_limiter: ClientRateLimiter::new(config.rate_limit, config.rate_limit_burst),
        auth_lookups: api::LookupLimiter::new(config.auth_lookups_per_second_max),
        body_bytes_max: config.body_bytes_max,
        body_read_timeout: config.client_request_timeout,
        readiness: ReadinessCache::new(config.readyz_cache_ttl),
        webhook_policy: crate::webhook::address_policy(config),
        webhook_endpoints_max: config.webhooks.webhook_endpoints_max,
        notifications,
        metrics,
    })
}

/// Opens the authentication pool's connections. They are opened, and so
/// driven, on this thread: only lookups of keys not yet in the
/// authentication cache use them.
async fn warm_auth(store: &Store) {
    let auth = store.clone();
    crate::warm::on(Arbiter::current(), "the authentication pool", async move {
        auth.warm_auth().await
    })
    .await;
}

/// Starts `--shards` shards, each on a thread of its own, handing rows to
/// the relay when there is one.
async fn start_shards(
    config: &ServeConfig,
    store: &Store,
    relay: Option<&RelayHandle>,
    parts: &mut Parts,
) -> anyhow::Result<ShardRouter> {
    let outlet = RelayOutlet {
        handoff: relay.map(|r| r.handoff.clone()),
        nudge: RelayNudge::start(store.outbox(), config.relay.relay_wake_interval),
        lag: relay.map_or_else(LagGate::open, |r| r.lag.clone()),
    };
    let (shards, arbiters) = ShardRouter::start(
        config.shards,
        store,
        ShardLimits::from(config),
        config.coalesce_timeout,
        Arc::new(outlet),
    )
    .await?;
    parts.extend(arbiters.into_iter().map(|a| Started::thread("a shard", a)));
    Ok(shards)
}

/// Starts the webhook delivery worker with its limits and handles.
fn start_webhooks(config: &ServeConfig, store: &Store) -> anyhow::Result<Started> {
    crate::webhook::start(
        WebhookLimits::from(config),
        crate::webhook::address_policy(config),
        config.webhooks.webhook_response_bytes_max,
        config.database.db_timeout,
        (store.deliveries(), store.listener()),
    )
}

/// Revocations reach every process's cache over NOTIFY, and each process
/// confirms, so `client revoke` returns once none trusts the key.
fn listen_for_revocations(store: &Store, cache: Arc<AuthCache>) -> Started {
    let revocations =
        store
            .listener()
            .listen_forever(REVOKED_CHANNEL, Some(REVOKED_ACK_CHANNEL), move |heard| {
                cache.on_revocation(heard)
            });
    let arbiter = Arbiter::new();
    arbiter.spawn(revocations);
    Started::thread("revocation listener", arbiter)
}

/// The HTTP server on `listener`: the API, and the console when it is on.
fn serve(
    config: &ServeConfig,
    listener: TcpListener,
    state: web::Data<AppState>,
    console: Option<web::Data<ConsoleState>>,
) -> std::io::Result<Server> {
    Ok(HttpServer::new(move || {
        let app = App::new()
            .app_data(state.clone())
            .wrap(from_fn(api::observe));
        match &console {
            Some(console) => app
                .app_data(console.clone())
                .configure(crate::console::routes)
                .configure(api::routes),
            None => app.configure(api::routes),
        }
    })
    .workers(config.http_workers)
    .max_connections(config.http_connections_max)
    .client_request_timeout(config.client_request_timeout)
    // Signals are the command line's to handle (`cli::signals`): every one
    // of them stops gracefully, so in-flight flushes finish.
    .disable_signals()
    .shutdown_timeout(5)
    .listen(listener)?
    .run())
}

/// "Address already in use", with the address and the flag that changes it.
pub fn bind_error(
    e: std::io::Error,
    addr: std::net::SocketAddr,
    flag: &str,
    env: &str,
) -> anyhow::Error {
    if e.kind() == std::io::ErrorKind::AddrInUse {
        anyhow::anyhow!("cannot listen on {addr}: the address is in use by another program; choose another with {flag} (or {env})")
    } else {
        anyhow::anyhow!("cannot listen on {addr} ({flag}): {e}")
    }
}
