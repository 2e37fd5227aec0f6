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
use crate::queue::worker::{Drain, Worker};
use crate::reaper::Reaper;
use crate::relay::{LagGate, Relay, RelayNudge};
use crate::shard::{ShardLimits, ShardRouter};
use crate::store::{Store, REVOKED_ACK_CHANNEL, REVOKED_CHANNEL};
use crate::telemetry;
use crate::webhook::delivery::DeliveryWork;

/// A built, bound, not yet awaited engine.
pub struct Application {
    port: u16,
    server: Option<Server>,
    handle: ServerHandle,
    reaper: Addr<Reaper>,
    store: Store,
    /// Threads of the shards, reaper and relay; stopped when this is dropped.
    arbiters: Vec<Arbiter>,
    /// The relay, drained when the server stops.
    relay: Option<Addr<Relay>>,
    /// The poller, drained with the relay.
    poller: Option<Addr<Worker<crate::outcome::poller::PollWork>>>,
    /// The webhook delivery worker, drained after the relay.
    deliveries: Option<Addr<Worker<DeliveryWork>>>,
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
        // Opened, and so driven, on this thread: only lookups of keys not
        // yet in the authentication cache use them.
        let auth = store.clone();
        crate::warm::on(
            actix::Arbiter::current(),
            "the authentication pool",
            async move { auth.warm_auth().await },
        )
        .await;

        // The relay first: the shards hand it the rows they claim.
        let relay = crate::relay::start(&config, &store).await?;
        let (shards, mut arbiters) = ShardRouter::start(
            config.shards,
            &store,
            ShardLimits::from(&config),
            config.coalesce_timeout,
            relay.as_ref().map(|r| r.handoff.clone()),
            relay.as_ref().map_or_else(LagGate::open, |r| r.lag.clone()),
            RelayNudge::start(store.clone(), config.relay.relay_wake_interval),
        )
        .await?;
        let (deliveries, webhook_arbiter) = crate::webhook::start(&config, &store)?;
        let (reaper, reaper_arbiter) = crate::reaper::start(&config, &store);
        let outcomes = crate::outcome::start(&config, &store)?;
        arbiters.extend([webhook_arbiter, reaper_arbiter, outcomes.arbiter]);
        let relay = relay.map(|r| {
            arbiters.push(r.arbiter);
            r.addr
        });

        // Revocations reach every process's cache over NOTIFY, and each
        // process confirms, so `client revoke` returns once none trusts the key.
        let auth_cache = Arc::new(AuthCache::new(
            config.auth_cache,
            config.auth_cache_ttl,
            config.auth_negative_cache,
            config.auth_negative_cache_ttl,
        ));
        let listener_cache = auth_cache.clone();
        let revocations = store.clone().listen_forever(
            REVOKED_CHANNEL,
            Some(REVOKED_ACK_CHANNEL),
            move |heard| listener_cache.on_revocation(heard),
        );
        let listener_arbiter = Arbiter::new();
        listener_arbiter.spawn(revocations);
        arbiters.push(listener_arbiter);

        let state = web::Data::new(AppState {
            store: store.clone(),
            auth_cache,
            shards,
            rate_limiter: ClientRateLimiter::new(config.rate_limit, config.rate_limit_burst),
            body_limit: config.body_limit,
            body_read_timeout: config.client_request_timeout,
            readiness: ReadinessCache::new(config.readyz_cache_ttl),
            webhook_policy: crate::webhook::address_policy(&config),
            webhook_endpoints_max: config.webhooks.webhook_endpoints_max,
            notifications: outcomes.intake,
            metrics,
        });
        // Off unless asked for: the console is a separate trust domain.
        let console = config
            .console
            .console
            .then(|| web::Data::new(ConsoleState::new(&config, &store)));
        let port = listener.local_addr()?.port();
        let server = HttpServer::new(move || {
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
        .max_connections(config.max_connections)
        .client_request_timeout(config.client_request_timeout)
        // Signals are the command line's to handle (`cli::signals`): every
        // one of them stops gracefully, so in-flight flushes finish.
        .disable_signals()
        .shutdown_timeout(5)
        .listen(listener)?
        .run();
        let handle = server.handle();
        tracing::info!(port, shards = config.shards, "payrail serving");
        Ok(Self {
            port,
            server: Some(server),
            handle,
            reaper,
            store,
            arbiters,
            relay,
            poller: outcomes.poller,
            deliveries: Some(deliveries),
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

    /// Serves until stopped, then drains the relay (no new claims; the
    /// calls in flight finish and their outcomes are recorded, within
    /// `--shutdown-grace`), then stops the actors' threads.
    pub async fn run_until_stopped(mut self) -> std::io::Result<()> {
        let served = match self.server.take() {
            Some(server) => server.await,
            None => Ok(()),
        };
        // The relay first: its settlements write the events the delivery
        // worker sends. Both within one grace.
        let relay = self.relay.take();
        let poller = self.poller.take();
        let deliveries = self.deliveries.take();
        let drain = async move {
            let relay_drained = async {
                if let Some(relay) = relay {
                    let _ = relay.send(Drain).await;
                    tracing::info!("relay drained: every call in flight was recorded");
                }
            };
            let poller_drained = async {
                if let Some(poller) = poller {
                    let _ = poller.send(Drain).await;
                }
            };
            futures::join!(relay_drained, poller_drained);
            if let Some(deliveries) = deliveries {
                let _ = deliveries.send(Drain).await;
                tracing::info!("webhook deliveries drained");
            }
        };
        if tokio::time::timeout(self.shutdown_grace, drain)
            .await
            .is_err()
        {
            tracing::warn!(
                grace = ?self.shutdown_grace,
                "not drained within --shutdown-grace; rows still held are taken over after their leases (outbox rows are looked up first)"
            );
        }
        served
    }
}

impl Drop for Application {
    fn drop(&mut self) {
        for arbiter in &self.arbiters {
            arbiter.stop();
        }
    }
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
