//! Builds and runs `payrail serve`. `main`, `payrail dev` and the tests all
//! start the engine through [`Application::build`], the same way.

use std::net::TcpListener;
use std::sync::Arc;

use actix::{Actor, Addr, Arbiter};
use actix_web::dev::{Server, ServerHandle};
use actix_web::{middleware::from_fn, web, App, HttpServer};

use crate::api::{self, AppState, AuthCache, ClientRateLimiter, ReadinessCache};
use crate::config::ServeConfig;
use crate::domain::webhook::AddressPolicy;
use crate::provider::http::HttpProvider;
use crate::queue::worker::{Drain, Worker};
use crate::reaper::{Reaper, ReaperLimits};
use crate::relay::{Handoff, HandoffCount, Relay, RelayLimits, RelayNudge};
use crate::shard::{ShardLimits, ShardRouter};
use crate::store::{FlushLimits, Store, REVOKED_ACK_CHANNEL, REVOKED_CHANNEL};
use crate::telemetry;
use crate::webhook::delivery::DeliveryWork;
use crate::webhook::sender::Sender;
use crate::webhook::WebhookLimits;

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
        // First, so that a busy port is said plainly before anything starts.
        let listener = TcpListener::bind(config.listen)
            .map_err(|e| bind_error(e, config.listen, "--listen", "PAYRAIL_LISTEN"))?;
        // Before any actor registers its metrics, so their handles are live.
        let metrics = telemetry::metrics_handle();
        let store = Store::connect(&config.database)?;
        store.migrate().await?;

        let mut arbiters = Vec::new();
        let mut relay_addr = None;
        // The relay first: the shards hand it the rows they claim.
        let handoff = match &config.provider_url {
            Some(url) => {
                let r = &config.relay;
                // One idle connection per call the relay may have in flight:
                // with fewer, every burst of calls closes the surplus and
                // the next opens them again.
                let provider = Arc::new(HttpProvider::with_pool(
                    url,
                    r.provider_timeout,
                    r.relay_concurrency,
                )?);
                let limits = RelayLimits::from(&config);
                let relay_arbiter = Arbiter::new();
                let count = Arc::new(HandoffCount::default());
                let relay = crate::relay::start(
                    &relay_arbiter,
                    store.clone(),
                    provider,
                    limits,
                    count.clone(),
                );
                arbiters.push(relay_arbiter);
                relay_addr = Some(relay.clone());
                Some(Handoff::new(relay, count, r.relay_queue, r.relay_lease))
            }
            None => {
                tracing::warn!("no --provider-url: the relay is off and transfers stay pending");
                None
            }
        };

        let limits = ShardLimits {
            batch_size_max: config.max_batch,
            queue_len_max: config.shard_queue,
            cache_entries_max: config.replay_cache,
            flushes_in_flight_max: config.shard_flushes,
            overlap_batch_min: config.shard_overlap_min,
            lock_retries_max: config.db_lock_retries,
            flush: FlushLimits {
                key_retention: config.key_retention,
                lock_timeout: config.db_lock_timeout,
            },
        };
        let (shards, shard_arbiters) = ShardRouter::start(
            config.shards,
            &store,
            limits,
            config.coalesce_timeout,
            handoff,
            RelayNudge::start(store.clone(), config.relay.relay_wake_interval),
        )?;
        arbiters.extend(shard_arbiters);

        let w = &config.webhooks;
        let policy = if w.webhook_allow_private {
            AddressPolicy::AllowPrivate
        } else {
            AddressPolicy::PublicOnly
        };
        let sender = Sender::new(w.webhook_timeout, policy, w.webhook_response_bytes)?;
        let webhook_limits = WebhookLimits::from(&config);
        let webhook_arbiter = Arbiter::new();
        let deliveries = crate::webhook::delivery::start(
            &webhook_arbiter,
            store.clone(),
            sender,
            webhook_limits,
            config.database.db_timeout,
        );
        arbiters.push(webhook_arbiter);

        let reaper_arbiter = Arbiter::new();
        let reaper_limits = ReaperLimits {
            interval: config.reaper_interval,
            batch_rows_max: config.reaper_batch,
            batches_per_tick_max: config.reaper_batches_per_tick,
            event_retention: config.event_retention,
        };
        let reaper_store = store.clone();
        let reaper = Reaper::start_in_arbiter(&reaper_arbiter.handle(), move |_| {
            Reaper::new(reaper_store, reaper_limits)
        });
        arbiters.push(reaper_arbiter);

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
            webhook_policy: policy,
            webhook_endpoints_max: config.webhooks.webhook_endpoints_max,
            metrics,
        });
        let port = listener.local_addr()?.port();
        let server = HttpServer::new(move || {
            App::new()
                .app_data(state.clone())
                .wrap(from_fn(api::observe))
                .configure(api::routes)
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
            relay: relay_addr,
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
        let deliveries = self.deliveries.take();
        let drain = async move {
            if let Some(relay) = relay {
                let _ = relay.send(Drain).await;
                tracing::info!("relay drained: every call in flight was recorded");
            }
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
