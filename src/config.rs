//! Every limit and knob of `payrail serve`, with its default, in one place.
//! Each flag also reads an environment variable; `payrail serve --help` lists them.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;

fn default_parallelism() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
}

/// Default of `--shards`, from the shard sweep of `scripts/bench`.
pub const DEFAULT_SHARDS: usize = 1;

/// Shortest `--key-retention` (a retry must find its key) and `--event-retention`.
pub const KEY_RETENTION_MIN: Duration = Duration::from_secs(1);
/// Longest `--key-retention` and `--event-retention` (one year and a day).
pub const KEY_RETENTION_MAX: Duration = Duration::from_secs(366 * 24 * 3600);

/// A retention `flag` must lie between [`KEY_RETENTION_MIN`] and
/// [`KEY_RETENTION_MAX`].
fn check_retention(flag: &str, value: Duration) -> Result<(), String> {
    if (KEY_RETENTION_MIN..=KEY_RETENTION_MAX).contains(&value) {
        return Ok(());
    }
    Err(format!(
        "{flag} must be between {} and {} (got {})",
        humantime::format_duration(KEY_RETENTION_MIN),
        humantime::format_duration(KEY_RETENTION_MAX),
        humantime::format_duration(value)
    ))
}

/// Connection to Postgres and the bounds on every database operation.
#[derive(Debug, Clone, Args)]
pub struct DatabaseConfig {
    /// Postgres connection URL.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: String,
    /// Most pooled Postgres connections per process, for everything but the
    /// shards' flushes: each shard has a pool of its own, of --shard-flushes
    /// connections.
    #[arg(long, env = "PAYRAIL_DB_POOL_SIZE", default_value_t = 16)]
    pub db_pool_size: usize,
    /// Pooled Postgres connections per process for authenticating API keys
    /// and answering `/readyz`, apart from the pool above: a flood of
    /// unknown keys can exhaust only these, never the connections that
    /// write transfers.
    #[arg(long, env = "PAYRAIL_AUTH_DB_POOL_SIZE", default_value_t = 2)]
    pub auth_db_pool_size: usize,
    /// Bound on one database operation (a flush, a read, a claim), including
    /// waiting for a pooled connection; past it the request answers 503.
    #[arg(long, env = "PAYRAIL_DB_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    pub db_timeout: Duration,
    /// Bound on opening one new connection.
    #[arg(long, env = "PAYRAIL_DB_CONNECT_TIMEOUT", default_value = "2s", value_parser = humantime::parse_duration)]
    pub db_connect_timeout: Duration,
}

/// Flags of `payrail serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeConfig {
    /// Address the HTTP API listens on (port 0 picks a free one).
    #[arg(long, env = "PAYRAIL_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub database: DatabaseConfig,
    /// Base URL of the payment provider; without it the relay does not run
    /// and transfers stay `pending`.
    #[arg(long, env = "PAYRAIL_PROVIDER_URL")]
    pub provider_url: Option<String>,
    /// Key-shard actors, each on its own thread. One is the measured best
    /// on 2 cores (docs/BENCHMARKS.md): its flushes overlap each other (see
    /// --shard-flushes) and it gets the largest batches; more shards run
    /// more flushes at once, which contend in Postgres and cost more per
    /// transfer.
    #[arg(long, env = "PAYRAIL_SHARDS", default_value_t = DEFAULT_SHARDS)]
    pub shards: usize,
    /// HTTP worker threads.
    #[arg(long, env = "PAYRAIL_HTTP_WORKERS", default_value_t = default_parallelism())]
    pub http_workers: usize,
    /// Open connections per HTTP worker; past it new ones wait in the accept
    /// queue. Each idle connection costs about 10 KiB (its read buffer), so
    /// this bounds that memory too.
    /// Was `--max-connections`, still accepted for one release.
    #[arg(
        long,
        alias = "max-connections",
        env = "PAYRAIL_HTTP_CONNECTIONS_MAX",
        default_value_t = 10_000
    )]
    pub http_connections_max: usize,
    /// How long an idempotency key is remembered.
    #[arg(long, env = "PAYRAIL_KEY_RETENTION", default_value = "24h", value_parser = humantime::parse_duration)]
    pub key_retention: Duration,
    /// How long webhook events (`GET /events`) are kept once every delivery
    /// of theirs is finished; the reaper then deletes them with their
    /// delivery records. An event with a delivery still to make is kept.
    #[arg(long, env = "PAYRAIL_EVENT_RETENTION", default_value = "30days", value_parser = humantime::parse_duration)]
    pub event_retention: Duration,
    /// How long an attempt waits for its key's write before `409 request-in-progress`.
    #[arg(long, env = "PAYRAIL_COALESCE_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub coalesce_timeout: Duration,
    /// Most new transfers written in one flush (one transaction). Was
    /// `--max-batch`, still accepted for one release.
    #[arg(
        long,
        alias = "max-batch",
        env = "PAYRAIL_SHARD_BATCH_MAX",
        default_value_t = 256
    )]
    pub shard_batch_max: usize,
    /// Flushes of one shard in flight at once. A new one starts only when
    /// the previous one has run its statements and waits for its COMMIT to
    /// be durable, so the two overlap without competing for Postgres's CPU.
    /// Also the size of each shard's own connection pool.
    #[arg(long, env = "PAYRAIL_SHARD_FLUSHES", default_value_t = 2)]
    pub shard_flushes: usize,
    /// Fewest attempts a flush needs to start while another flush of its
    /// shard is still in flight (committing). A smaller batch waits for that
    /// commit instead: under light load two small flushes at once cost
    /// Postgres more (they contend for the same pages) than one flush
    /// twice the size, and answer later; under heavy load batches are large
    /// and the overlap keeps Postgres busy during commits.
    #[arg(long, env = "PAYRAIL_SHARD_OVERLAP_MIN", default_value_t = 16)]
    pub shard_overlap_min: usize,
    /// How long a flush waits for a row lock held by another transaction
    /// (another process writing the same key, or one frozen mid-transaction)
    /// before it splits the batch, so only the attempt that waited answers
    /// `409`; every other attempt of the batch is written.
    #[arg(long, env = "PAYRAIL_DB_LOCK_TIMEOUT", default_value = "250ms", value_parser = humantime::parse_duration)]
    pub db_lock_timeout: Duration,
    /// Times a flush is retried whole when it waited past
    /// `--db-lock-timeout` for a lock that is not a row's: a table lock, or
    /// the lock on growing a table, which a slow disk write can hold that
    /// long. No other request holds those keys, so the retry is likely to
    /// succeed; past the retries its attempts answer `503`.
    #[arg(long, env = "PAYRAIL_DB_LOCK_RETRIES", default_value_t = 3)]
    pub db_lock_retries: u32,
    /// Most attempts queued in one shard (waiting for a flush or for their
    /// key's write); past it requests get `503 overloaded`.
    #[arg(long, env = "PAYRAIL_SHARD_QUEUE", default_value_t = 4096)]
    pub shard_queue: usize,
    /// Recent answers kept per shard to serve replays without Postgres.
    #[arg(long, env = "PAYRAIL_REPLAY_CACHE", default_value_t = 10_000)]
    pub replay_cache: usize,
    /// API keys remembered as valid, so replays skip a Postgres round-trip.
    /// Revocations still take effect at once: each one waits until every
    /// process has evicted the key.
    #[arg(long, env = "PAYRAIL_AUTH_CACHE", default_value_t = 10_000)]
    pub auth_cache: usize,
    /// How long a remembered key is trusted before Postgres is asked again
    /// (0 turns the cache off); bounds staleness should a process miss a
    /// revocation's confirmation window.
    #[arg(long, env = "PAYRAIL_AUTH_CACHE_TTL", default_value = "60s", value_parser = humantime::parse_duration)]
    pub auth_cache_ttl: Duration,
    /// Unknown API keys remembered as unknown, so a caller retrying a wrong
    /// key costs no Postgres query each time.
    #[arg(long, env = "PAYRAIL_AUTH_NEGATIVE_CACHE", default_value_t = 10_000)]
    pub auth_negative_cache: usize,
    /// How long an unknown key is remembered as unknown (0 turns it off).
    /// Keys are random, so a new client's key is never one that was tried.
    #[arg(long, env = "PAYRAIL_AUTH_NEGATIVE_CACHE_TTL", default_value = "5s", value_parser = humantime::parse_duration)]
    pub auth_negative_cache_ttl: Duration,
    /// Lookups of API keys in neither cache, per second and process (bursts
    /// as large): past it such a request gets `503 overloaded` without a
    /// query, so a flood of random keys costs Postgres at most this much,
    /// while keys already known (cached) keep working.
    #[arg(
        long,
        env = "PAYRAIL_AUTH_LOOKUPS_PER_SECOND_MAX",
        default_value_t = 1000
    )]
    pub auth_lookups_per_second_max: u32,
    /// How long a `/readyz` answer is reused, so a flood of probes costs
    /// Postgres one query per interval.
    #[arg(long, env = "PAYRAIL_READYZ_CACHE_TTL", default_value = "1s", value_parser = humantime::parse_duration)]
    pub readyz_cache_ttl: Duration,
    /// Requests per second each client may make to `/transfers` (token
    /// bucket); past it `429 rate-limited` with `Retry-After`, so one client
    /// cannot starve the shards of the others.
    #[arg(long, env = "PAYRAIL_RATE_LIMIT", default_value_t = 1000)]
    pub rate_limit: u32,
    /// Requests a client may make at once after being idle (the bucket size).
    #[arg(long, env = "PAYRAIL_RATE_LIMIT_BURST", default_value_t = 1000)]
    pub rate_limit_burst: u32,
    /// Largest accepted request body, in bytes. Was `--body-limit`, still
    /// accepted for one release.
    #[arg(
        long,
        alias = "body-limit",
        env = "PAYRAIL_BODY_BYTES_MAX",
        default_value_t = 64 * 1024
    )]
    pub body_bytes_max: usize,
    /// Time a client gets to send its request head, and again its body;
    /// past it the connection is closed (`408`).
    #[arg(long, env = "PAYRAIL_CLIENT_REQUEST_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    pub client_request_timeout: Duration,
    /// How often the reaper deletes expired idempotency keys, old events
    /// and endpoints deleted past --event-retention.
    #[arg(long, env = "PAYRAIL_REAPER_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub reaper_interval: Duration,
    /// Most rows the reaper deletes per statement. Was `--reaper-batch`,
    /// still accepted for one release.
    #[arg(
        long,
        alias = "reaper-batch",
        env = "PAYRAIL_REAPER_BATCH_MAX",
        default_value_t = 5000
    )]
    pub reaper_batch_max: i64,
    /// Most reaper statements per tick and table, so one tick cannot hog
    /// the database. With the defaults the reaper deletes at most 1 000 000
    /// keys per 10 s tick: 100 000 keys/s, five times the peak create rate
    /// measured on 2 cores. A tick ends early once a statement finds fewer
    /// rows than its batch. Was `--reaper-batches-per-tick`, still accepted
    /// for one release.
    #[arg(
        long,
        alias = "reaper-batches-per-tick",
        env = "PAYRAIL_REAPER_BATCHES_PER_TICK_MAX",
        default_value_t = 200
    )]
    pub reaper_batches_per_tick_max: usize,
    /// On SIGTERM, how long the relay may take to finish the provider calls
    /// in flight and record their outcomes before the process exits (it
    /// claims nothing new meanwhile). A call cut off by the exit is not
    /// lost: its row is taken over after its lease and looked up first.
    #[arg(long, env = "PAYRAIL_SHUTDOWN_GRACE", default_value = "20s", value_parser = humantime::parse_duration)]
    pub shutdown_grace: Duration,
    #[command(flatten)]
    pub relay: RelayConfig,
    #[command(flatten)]
    pub webhooks: WebhookConfig,
    #[command(flatten)]
    pub outcomes: OutcomeConfig,
    #[command(flatten)]
    pub console: ConsoleConfig,
}

/// Flags of the operator console (`/console`).
#[derive(Debug, Clone, Args)]
pub struct ConsoleConfig {
    /// Serve the operator console at /console (off by default: it is a
    /// separate trust domain, opened by operator tokens only).
    #[arg(long, env = "PAYRAIL_CONSOLE")]
    pub console: bool,
    /// How long a console session lasts after sign-in.
    #[arg(long, env = "PAYRAIL_CONSOLE_SESSION_TTL", default_value = "8h", value_parser = humantime::parse_duration)]
    pub console_session_ttl: Duration,
    /// Rows per console page.
    #[arg(long, env = "PAYRAIL_CONSOLE_PAGE_ROWS_MAX", default_value_t = 50)]
    pub console_page_rows_max: i64,
    /// Transfers a filtered page reads at most before it stops and offers
    /// to look further (status and provider reference have no index of
    /// their own: indexing them would cost every settlement).
    #[arg(long, env = "PAYRAIL_CONSOLE_SCAN_ROWS_MAX", default_value_t = 20_000)]
    pub console_scan_rows_max: i64,
    /// Rows one bulk action (retry every dead row matching a filter,
    /// redeliver an endpoint's dead deliveries) changes at most.
    #[arg(long, env = "PAYRAIL_CONSOLE_BULK_ROWS_MAX", default_value_t = 10_000)]
    pub console_bulk_rows_max: i64,
    /// Rows per second at which a bulk retry of dead outbox rows makes them
    /// due again (the first at once): 10 000 parked rows re-enter over 20 s
    /// at the default, not as one burst.
    #[arg(
        long,
        env = "PAYRAIL_CONSOLE_BULK_RETRY_ROWS_PER_SECOND",
        default_value_t = 500
    )]
    pub console_bulk_retry_rows_per_second: u32,
}

/// Flags of asynchronous payouts: the provider's signed notifications and
/// the status lookups of transfers in `processing`.
#[derive(Debug, Clone, Args)]
pub struct OutcomeConfig {
    /// Secrets the provider signs its notifications with (`whsec_…`,
    /// comma-separated: during a rotation, both the old and the new one).
    /// Without one, `POST /provider/notifications` answers 404.
    #[arg(long, env = "PAYRAIL_PROVIDER_NOTIFICATION_SECRET", value_delimiter = ',',
          value_parser = crate::domain::webhook::WebhookSecret::parse, hide_env_values = true)]
    pub provider_notification_secret: Vec<crate::domain::webhook::WebhookSecret>,
    /// How far a notification's timestamp may be from this clock, either
    /// way; an older one is refused as a possible replay.
    #[arg(long, env = "PAYRAIL_PROVIDER_NOTIFICATION_TOLERANCE", default_value = "5m", value_parser = humantime::parse_duration)]
    pub provider_notification_tolerance: Duration,
    /// Largest notification body read, in bytes. Was
    /// `--provider-notification-body-max`, still accepted for one release.
    #[arg(
        long,
        alias = "provider-notification-body-max",
        env = "PAYRAIL_PROVIDER_NOTIFICATION_BODY_BYTES_MAX",
        default_value_t = 16 * 1024
    )]
    pub provider_notification_body_bytes_max: usize,
    /// Most notifications applied in one transaction.
    #[arg(
        long,
        env = "PAYRAIL_PROVIDER_NOTIFICATION_BATCH_MAX",
        default_value_t = 512
    )]
    pub provider_notification_batch_max: usize,
    /// Most notifications waiting for their batch; past it new ones are
    /// answered 503 with Retry-After and the provider sends them again.
    #[arg(
        long,
        env = "PAYRAIL_PROVIDER_NOTIFICATION_QUEUE_MAX",
        default_value_t = 8192
    )]
    pub provider_notification_queue_max: usize,
    /// How long a notification id is remembered, so that a repeat of it
    /// changes nothing; providers retry for about three days.
    #[arg(long, env = "PAYRAIL_PROVIDER_NOTIFICATION_RETENTION", default_value = "7days", value_parser = humantime::parse_duration)]
    pub provider_notification_retention: Duration,
    /// How long a transfer stays `processing` before the provider is asked
    /// about it (a notification usually comes first).
    #[arg(long, env = "PAYRAIL_PROVIDER_POLL_AFTER", default_value = "60s", value_parser = humantime::parse_duration)]
    pub provider_poll_after: Duration,
    /// Longest pause between two lookups of one transfer; they start at
    /// --provider-poll-after and double.
    #[arg(long, env = "PAYRAIL_PROVIDER_POLL_INTERVAL_MAX", default_value = "1h", value_parser = humantime::parse_duration)]
    pub provider_poll_interval_max: Duration,
    /// A transfer `processing` for longer is flagged for operators
    /// (`payrail transfers stuck`, `payrail_transfers_stuck`) and still
    /// looked up.
    #[arg(long, env = "PAYRAIL_PROVIDER_PROCESSING_MAX", default_value = "7days", value_parser = humantime::parse_duration)]
    pub provider_processing_max: Duration,
    /// Lookups in flight at once per process.
    #[arg(long, env = "PAYRAIL_PROVIDER_POLL_CONCURRENCY", default_value_t = 16)]
    pub provider_poll_concurrency: usize,
    /// How often the lookup queue is checked for due lookups (nothing
    /// announces them: they fall due by time).
    #[arg(long, env = "PAYRAIL_PROVIDER_POLL_SCAN_INTERVAL", default_value = "1s", value_parser = humantime::parse_duration)]
    pub provider_poll_scan_interval: Duration,
    /// Most lookups' outcomes settled in one transaction.
    #[arg(
        long,
        env = "PAYRAIL_PROVIDER_POLL_SETTLE_BATCH_MAX",
        default_value_t = 256
    )]
    pub provider_poll_settle_batch_max: usize,
    /// How long after a transfer succeeded its provider may still return
    /// it (a bank refusing the credit). The transfer is looked up again
    /// during this window (--return-lookups times, evenly spread, the last
    /// at its end), so a return whose notifications were all lost is still
    /// found. 0s: never; a return is then learned from its notification
    /// only.
    #[arg(long, env = "PAYRAIL_RETURN_WINDOW", default_value = "7days", value_parser = humantime::parse_duration)]
    pub return_window: Duration,
    /// Lookups of a succeeded transfer during --return-window (1 to 100):
    /// each is one provider lookup per succeeded transfer.
    #[arg(long, env = "PAYRAIL_RETURN_LOOKUPS", default_value_t = 3)]
    pub return_lookups: i32,
}

/// Most lookups of one succeeded transfer during its return window: each
/// costs a provider call per succeeded transfer.
pub const RETURN_LOOKUPS_MAX: i32 = 100;

/// Flags of webhook delivery.
#[derive(Debug, Clone, Args)]
pub struct WebhookConfig {
    /// Bound on one delivery attempt: connect, send, and the answer's head.
    #[arg(long, env = "PAYRAIL_WEBHOOK_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub webhook_timeout: Duration,
    /// Multiplies the retry schedule (5 s, 5 min, 30 min, 2 h, 5 h, 10 h,
    /// 10 h); below 1 only for tests.
    #[arg(long, env = "PAYRAIL_WEBHOOK_RETRY_SCALE", default_value_t = 1.0)]
    pub webhook_retry_scale: f64,
    /// Accept endpoint URLs on loopback, private and link-local addresses
    /// (tests and `payrail dev`); without it such URLs get 422, and names
    /// resolving to such addresses are never called.
    #[arg(long, env = "PAYRAIL_WEBHOOK_ALLOW_PRIVATE")]
    pub webhook_allow_private: bool,
    /// Delivery attempts in flight at once per process.
    #[arg(long, env = "PAYRAIL_WEBHOOK_CONCURRENCY", default_value_t = 64)]
    pub webhook_concurrency: usize,
    /// How long a claimed delivery is held; must exceed --webhook-timeout
    /// plus every try of its settlement (3 × --db-timeout and the pauses
    /// between), so no takeover overlaps a live attempt.
    #[arg(long, env = "PAYRAIL_WEBHOOK_LEASE", default_value = "60s", value_parser = humantime::parse_duration)]
    pub webhook_lease: Duration,
    /// Fallback poll for due deliveries when no notification arrives.
    #[arg(long, env = "PAYRAIL_WEBHOOK_POLL", default_value = "1s", value_parser = humantime::parse_duration)]
    pub webhook_poll: Duration,
    /// Most live webhook endpoints per client; past it `422
    /// webhook-endpoint-limit`.
    #[arg(long, env = "PAYRAIL_WEBHOOK_ENDPOINTS_MAX", default_value_t = crate::domain::webhook::ENDPOINTS_PER_CLIENT_DEFAULT)]
    pub webhook_endpoints_max: i64,
    /// Bytes of a receiver's answer read (and kept, as text, in the
    /// delivery's last error); the rest is never read. Was
    /// `--webhook-response-bytes`, still accepted for one release.
    #[arg(
        long,
        alias = "webhook-response-bytes",
        env = "PAYRAIL_WEBHOOK_RESPONSE_BYTES_MAX",
        default_value_t = 1024
    )]
    pub webhook_response_bytes_max: usize,
    /// Most attempts in flight to one endpoint at once, over every process.
    /// A receiver that hangs holds this many slots until they time out,
    /// never everyone's. It also bounds one endpoint's throughput: this
    /// many deliveries per cycle of an attempt, its settlement and the
    /// next claim (docs/BENCHMARKS.md measures it).
    #[arg(
        long,
        env = "PAYRAIL_WEBHOOK_ENDPOINT_IN_FLIGHT_MAX",
        default_value_t = 16
    )]
    pub webhook_endpoint_in_flight_max: i64,
    /// Most attempts in flight to one client's endpoints at once, over every
    /// process: a client whose receivers all hang costs the others at most
    /// this many slots. Keep it below --webhook-concurrency.
    #[arg(
        long,
        env = "PAYRAIL_WEBHOOK_CLIENT_IN_FLIGHT_MAX",
        default_value_t = 32
    )]
    pub webhook_client_in_flight_max: i64,
}

/// Flags of the outbox relay.
#[derive(Debug, Clone, Args)]
pub struct RelayConfig {
    /// Bound on one provider call.
    #[arg(long, env = "PAYRAIL_PROVIDER_TIMEOUT", default_value = "5s", value_parser = humantime::parse_duration)]
    pub provider_timeout: Duration,
    /// Provider calls in flight at once per process: at most this many
    /// payouts per provider round trip (128 calls at 100 ms per answer make
    /// 1 280 payouts/s). Raise it for a slow provider, lower it for one that
    /// limits concurrent requests; docs/BENCHMARKS.md has the measured
    /// choice of the default.
    #[arg(long, env = "PAYRAIL_RELAY_CONCURRENCY", default_value_t = 128)]
    pub relay_concurrency: usize,
    /// Provider connections opened before the process reports ready (at
    /// most --relay-concurrency; 0: none). A fresh process under load
    /// otherwise opens one per call in flight during its first burst, and
    /// the payouts of that burst wait on the handshakes (docs/BENCHMARKS.md).
    #[arg(long, env = "PAYRAIL_RELAY_WARM_CONNECTIONS", default_value_t = 128)]
    pub relay_warm_connections: usize,
    /// Fallback poll interval when no notification arrives.
    #[arg(long, env = "PAYRAIL_RELAY_POLL", default_value = "1s", value_parser = humantime::parse_duration)]
    pub relay_poll: Duration,
    /// Least time between two NOTIFYs that wake the relays of every process
    /// after flushes committed rows none of them claimed; each NOTIFY
    /// answers every such flush since the one before (why not one per
    /// flush: docs/BENCHMARKS.md).
    #[arg(long, env = "PAYRAIL_RELAY_WAKE_INTERVAL", default_value = "10ms", value_parser = humantime::parse_duration)]
    pub relay_wake_interval: Duration,
    /// How long a claimed row is held. It must outlast what one claimed
    /// row can take: a lookup and a call (2 × --provider-timeout) and the
    /// settlement's three tries (3 × --db-timeout), so that a takeover never
    /// overlaps a live call; a row taken over is looked up before anything
    /// is posted again. It is also how long rows of a killed process wait.
    #[arg(long, env = "PAYRAIL_RELAY_LEASE", default_value = "45s", value_parser = humantime::parse_duration)]
    pub relay_lease: Duration,
    /// The relay's provider calls per retry budget before a row is
    /// dead-lettered (`payrail outbox retry` starts a new budget). Was
    /// `--max-attempts`, still accepted for one release.
    #[arg(
        long,
        alias = "max-attempts",
        env = "PAYRAIL_RELAY_ATTEMPTS_MAX",
        default_value_t = 20
    )]
    pub relay_attempts_max: i32,
    /// Rows a flush may hand straight to this process's relay (claimed in
    /// the flush's own transaction) that are not yet settled. Past it new
    /// rows are written unclaimed and relays claim them from Postgres.
    #[arg(long, env = "PAYRAIL_RELAY_QUEUE", default_value_t = 4096)]
    pub relay_queue: usize,
    /// Most provider outcomes settled in one transaction. Was
    /// `--relay-settle-batch`, still accepted for one release.
    #[arg(
        long,
        alias = "relay-settle-batch",
        env = "PAYRAIL_RELAY_SETTLE_BATCH_MAX",
        default_value_t = 256
    )]
    pub relay_settle_batch_max: usize,
    /// The relay's first retry delay; doubles per attempt up to the cap,
    /// with full jitter. Was `--retry-base`, still accepted for one release.
    #[arg(long, alias = "retry-base", env = "PAYRAIL_RELAY_RETRY_BASE", default_value = "100ms", value_parser = humantime::parse_duration)]
    pub relay_retry_base: Duration,
    /// The relay's longest retry delay. Was `--retry-cap`, still accepted
    /// for one release.
    #[arg(long, alias = "retry-cap", env = "PAYRAIL_RELAY_RETRY_CAP", default_value = "60s", value_parser = humantime::parse_duration)]
    pub relay_retry_cap: Duration,
    /// Bound on settlement lag: while an outbox row has waited this long
    /// for a relay (due, held by none), new transfers are refused with 503
    /// and Retry-After until the oldest waiting row is younger than half of
    /// it. Rows in a retry's backoff do not count.
    #[arg(long, env = "PAYRAIL_OUTBOX_LAG_MAX", default_value = "10s", value_parser = humantime::parse_duration)]
    pub outbox_lag_max: Duration,
    /// Bound on settlement backlog: while more outbox rows than this wait
    /// for a relay, new transfers are refused as for `--outbox-lag-max`,
    /// until fewer than half of it wait. At a settlement rate of r rows/s
    /// it bounds a new row's wait to about this / r.
    #[arg(long, env = "PAYRAIL_OUTBOX_BACKLOG_MAX", default_value_t = 10_000)]
    pub outbox_backlog_max: i64,
    /// How often the relay measures that lag (one indexed query).
    #[arg(long, env = "PAYRAIL_OUTBOX_LAG_POLL", default_value = "500ms", value_parser = humantime::parse_duration)]
    pub outbox_lag_poll: Duration,
}

/// Environment variables of renamed flags, still read under their old
/// names for one release: (old variable, its flag now, its variable now).
/// A renamed variable that were simply dropped would leave a deployment's
/// setting at its default without a word.
pub const RENAMED_ENV: &[(&str, &str, &str)] = &[
    (
        "PAYRAIL_MAX_CONNECTIONS",
        "--http-connections-max",
        "PAYRAIL_HTTP_CONNECTIONS_MAX",
    ),
    (
        "PAYRAIL_BODY_LIMIT",
        "--body-bytes-max",
        "PAYRAIL_BODY_BYTES_MAX",
    ),
    (
        "PAYRAIL_PROVIDER_NOTIFICATION_BODY_MAX",
        "--provider-notification-body-bytes-max",
        "PAYRAIL_PROVIDER_NOTIFICATION_BODY_BYTES_MAX",
    ),
    (
        "PAYRAIL_WEBHOOK_RESPONSE_BYTES",
        "--webhook-response-bytes-max",
        "PAYRAIL_WEBHOOK_RESPONSE_BYTES_MAX",
    ),
];

/// The flags that stand for old-named variables set in the environment
/// (`env` reads it) whose new names are not set: put before the command
/// line's own flags, which win over them. Each is announced on stderr.
pub fn renamed_env_flags(
    env: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Vec<std::ffi::OsString> {
    let mut flags = Vec::new();
    for (old, flag, new) in RENAMED_ENV {
        if let (Some(value), None) = (env(old), env(new)) {
            eprintln!("payrail: {old} is read as {new} ({flag}); rename it, the old name goes in the next release");
            let mut arg = std::ffi::OsString::from(format!("{flag}="));
            arg.push(value);
            flags.push(arg);
        }
    }
    assert!(flags.len() <= RENAMED_ENV.len());
    flags
}

impl ServeConfig {
    /// Rejects combinations that would break a guarantee.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("--shards", self.shards),
            ("--http-workers", self.http_workers),
            ("--http-connections-max", self.http_connections_max),
            ("--shard-batch-max", self.shard_batch_max),
            ("--shard-queue", self.shard_queue),
            ("--replay-cache", self.replay_cache),
            ("--auth-negative-cache", self.auth_negative_cache),
            ("--db-pool-size", self.database.db_pool_size),
            ("--auth-db-pool-size", self.database.auth_db_pool_size),
            ("--relay-concurrency", self.relay.relay_concurrency),
            ("--relay-queue", self.relay.relay_queue),
            (
                "--relay-settle-batch-max",
                self.relay.relay_settle_batch_max,
            ),
            ("--shard-flushes", self.shard_flushes),
            ("--shard-overlap-min", self.shard_overlap_min),
            ("--webhook-concurrency", self.webhooks.webhook_concurrency),
            (
                "--webhook-response-bytes-max",
                self.webhooks.webhook_response_bytes_max,
            ),
            (
                "--webhook-endpoints-max",
                self.webhooks.webhook_endpoints_max.max(0) as usize,
            ),
            ("--rate-limit", self.rate_limit as usize),
            (
                "--provider-notification-body-bytes-max",
                self.outcomes.provider_notification_body_bytes_max,
            ),
            (
                "--provider-notification-batch-max",
                self.outcomes.provider_notification_batch_max,
            ),
            (
                "--provider-notification-queue-max",
                self.outcomes.provider_notification_queue_max,
            ),
            (
                "--provider-poll-concurrency",
                self.outcomes.provider_poll_concurrency,
            ),
            (
                "--provider-poll-settle-batch-max",
                self.outcomes.provider_poll_settle_batch_max,
            ),
            ("--rate-limit-burst", self.rate_limit_burst as usize),
            (
                "--auth-lookups-per-second-max",
                self.auth_lookups_per_second_max as usize,
            ),
        ];
        if let Some((flag, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{flag} must be at least 1"));
        }
        self.relay.validate()?;
        self.console.validate()?;
        self.webhooks.validate(self.database.db_timeout)?;
        self.outcomes.validate()?;
        if self.reaper_batch_max < 1 {
            return Err("--reaper-batch-max must be at least 1".into());
        }
        // 0 would turn idempotency off (or delete events at once) without a
        // word; a huge value would overflow timestamps. Both are mistakes,
        // said at start-up.
        check_retention("--key-retention", self.key_retention)?;
        check_retention("--event-retention", self.event_retention)?;
        if self.db_lock_timeout.is_zero() || self.db_lock_timeout >= self.database.db_timeout {
            return Err("--db-lock-timeout must be above 0 and below --db-timeout".into());
        }
        Ok(())
    }
}

impl RelayConfig {
    /// The relay's own flags against each other. Its lease against its
    /// calls and settlement is checked by `relay::check`, where that
    /// arithmetic lives.
    fn validate(&self) -> Result<(), String> {
        if self.relay_attempts_max < 1 {
            return Err("--relay-attempts-max must be at least 1".into());
        }
        if self.relay_retry_cap.is_zero() || self.relay_retry_base > self.relay_retry_cap {
            return Err(
                "--relay-retry-base must be at most --relay-retry-cap, which is above 0".into(),
            );
        }
        if self.outbox_lag_poll.is_zero() || self.outbox_lag_poll >= self.outbox_lag_max {
            return Err("--outbox-lag-poll must be above 0 and below --outbox-lag-max".into());
        }
        if self.outbox_backlog_max < 1 {
            return Err("--outbox-backlog-max must be at least 1".into());
        }
        if self.relay_wake_interval >= self.relay_poll {
            return Err("--relay-wake-interval must be below --relay-poll".into());
        }
        Ok(())
    }
}

impl ConsoleConfig {
    /// Pages and bulk repairs are bounded, and sessions end.
    fn validate(&self) -> Result<(), String> {
        if self.console_page_rows_max < 1
            || self.console_scan_rows_max < self.console_page_rows_max
            || self.console_bulk_rows_max < 1
            || self.console_bulk_retry_rows_per_second < 1
            || self.console_session_ttl.is_zero()
        {
            return Err("--console-page-rows-max, --console-bulk-rows-max, \
                 --console-bulk-retry-rows-per-second and --console-session-ttl \
                 must be above 0, and --console-scan-rows-max at least --console-page-rows-max"
                .into());
        }
        Ok(())
    }
}

impl WebhookConfig {
    /// The delivery worker's flags, against `db_timeout` (`--db-timeout`).
    fn validate(&self, db_timeout: Duration) -> Result<(), String> {
        if self.webhook_endpoint_in_flight_max < 1 || self.webhook_client_in_flight_max < 1 {
            return Err(
                "--webhook-endpoint-in-flight-max and --webhook-client-in-flight-max must be at least 1"
                    .into(),
            );
        }
        // A delivery attempt and its settlement must end before its lease,
        // so that no takeover overlaps it (the delivery worker's call window).
        let work = self.webhook_timeout;
        if crate::queue::window::call_window(self.webhook_lease, work, db_timeout).is_none() {
            return Err(format!(
                "--webhook-lease must be longer than --webhook-timeout plus 3 × --db-timeout \
                 and the pauses between those tries ({:?} here)",
                work + crate::queue::window::settle_bound(db_timeout)
            ));
        }
        let scale = self.webhook_retry_scale;
        if !(scale.is_finite() && scale > 0.0 && scale <= 1000.0) {
            return Err("--webhook-retry-scale must be above 0 and at most 1000".into());
        }
        Ok(())
    }
}

impl OutcomeConfig {
    /// Notifications and status lookups.
    fn validate(&self) -> Result<(), String> {
        check_retention(
            "--provider-notification-retention",
            self.provider_notification_retention,
        )?;
        // A notification is accepted while its timestamp is within the
        // tolerance; its id must be remembered at least as long, or a copy
        // replayed after the id was forgotten would be applied again.
        if self.provider_notification_retention < self.provider_notification_tolerance {
            return Err(
                "--provider-notification-retention must be at least --provider-notification-tolerance"
                    .into(),
            );
        }
        if self.provider_poll_after.is_zero()
            || self.provider_poll_after > self.provider_poll_interval_max
        {
            return Err(
                "--provider-poll-after must be above 0 and at most --provider-poll-interval-max"
                    .into(),
            );
        }
        if self.provider_poll_scan_interval.is_zero() {
            return Err("--provider-poll-scan-interval must be above 0".into());
        }
        if self.provider_notification_tolerance.is_zero() {
            return Err("--provider-notification-tolerance must be above 0".into());
        }
        if !(1..=RETURN_LOOKUPS_MAX).contains(&self.return_lookups) {
            return Err(format!(
                "--return-lookups must be between 1 and {RETURN_LOOKUPS_MAX}"
            ));
        }
        if !self.return_window.is_zero()
            && self.return_window / (self.return_lookups as u32) < Duration::from_secs(1)
        {
            return Err(
                "--return-window must leave at least 1s between two of its --return-lookups".into(),
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    fn parse(flags: &[&str]) -> super::ServeConfig {
        let mut args = vec!["--database-url", "postgres://x@127.0.0.1/db"];
        args.extend_from_slice(flags);
        crate::cli::serve_config(args).expect("valid flags")
    }

    #[test]
    fn a_webhook_lease_too_short_for_an_attempt_and_every_settlement_try_is_refused() {
        // 2 s attempt + 3 × 2 s tries + 2 × 200 ms pauses = 8.4 s.
        let short = &[
            "--webhook-timeout",
            "2s",
            "--db-timeout",
            "2s",
            "--webhook-lease",
            "8s",
        ];
        let err = parse(short).validate().unwrap_err();
        assert!(
            err.contains("--webhook-lease") && err.contains("8.4s"),
            "{err}"
        );
        let fits = &[
            "--webhook-timeout",
            "2s",
            "--db-timeout",
            "2s",
            "--webhook-lease",
            "9s",
        ];
        assert!(parse(fits).validate().is_ok());
        assert!(parse(&[]).validate().is_ok(), "the defaults fit");
    }

    #[test]
    fn return_lookups_are_bounded_and_spread_over_their_window() {
        assert!(parse(&[]).validate().is_ok(), "the defaults: 3 over 7 days");
        for bad in [
            &["--return-lookups", "0"][..],
            &["--return-lookups", "101"],
            &["--return-window", "2s", "--return-lookups", "3"],
        ] {
            let err = parse(bad).validate().unwrap_err();
            assert!(err.contains("--return-"), "{bad:?}: {err}");
        }
        assert!(parse(&["--return-window", "0s"]).validate().is_ok(), "off");
    }

    #[test]
    fn notification_ids_are_kept_at_least_as_long_as_a_notification_is_accepted() {
        let short = &[
            "--provider-notification-tolerance",
            "10m",
            "--provider-notification-retention",
            "5m",
        ];
        let err = parse(short).validate().unwrap_err();
        assert!(err.contains("--provider-notification-retention"), "{err}");
        let equal = &[
            "--provider-notification-tolerance",
            "10m",
            "--provider-notification-retention",
            "10m",
        ];
        assert!(parse(equal).validate().is_ok());
    }

    #[test]
    fn the_lookup_queue_has_flags_of_its_own() {
        let c = parse(&["--relay-poll", "3s", "--relay-settle-batch-max", "5"]);
        assert_eq!(
            c.outcomes.provider_poll_scan_interval,
            Duration::from_secs(1)
        );
        assert_eq!(c.outcomes.provider_poll_settle_batch_max, 256);
        let c = parse(&["--provider-poll-scan-interval", "0s"]);
        assert!(c
            .validate()
            .unwrap_err()
            .contains("--provider-poll-scan-interval"));
    }

    #[test]
    fn old_environment_names_are_read_unless_the_new_one_is_set() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| std::ffi::OsString::from(v))
            }
        };
        let flags = super::renamed_env_flags(env(&[("PAYRAIL_BODY_LIMIT", "100")]));
        assert_eq!(flags, ["--body-bytes-max=100"]);
        let both = &[
            ("PAYRAIL_BODY_LIMIT", "100"),
            ("PAYRAIL_BODY_BYTES_MAX", "200"),
        ];
        assert!(
            super::renamed_env_flags(env(both)).is_empty(),
            "the new name wins"
        );
        // The command line's own flag comes after, and wins.
        let mut args: Vec<String> = flags.iter().map(|f| f.to_string_lossy().into()).collect();
        args.extend(["--body-bytes-max".into(), "300".into()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(parse(&args).body_bytes_max, 300);
        let cli = <crate::cli::Cli as clap::Parser>::try_parse_from([
            "payrail",
            "serve",
            "--database-url",
            "postgres://x@127.0.0.1/db",
            "--webhook-response-bytes-max=5",
            "--webhook-response-bytes-max=7",
        ])
        .expect("serve takes a flag twice, the last one winning");
        let crate::cli::Command::Serve(c) = cli.command else {
            panic!("serve")
        };
        assert_eq!(c.webhooks.webhook_response_bytes_max, 7);
    }

    #[test]
    fn renamed_flags_keep_their_old_spelling_for_one_release() {
        let old = parse(&[
            "--max-batch",
            "7",
            "--max-attempts",
            "4",
            "--retry-base",
            "10ms",
            "--retry-cap",
            "2s",
            "--relay-settle-batch",
            "9",
            "--reaper-batch",
            "11",
            "--reaper-batches-per-tick",
            "13",
            "--max-connections",
            "17",
            "--body-limit",
            "19",
            "--provider-notification-body-max",
            "23",
            "--webhook-response-bytes",
            "29",
        ]);
        let new = parse(&[
            "--shard-batch-max",
            "7",
            "--relay-attempts-max",
            "4",
            "--relay-retry-base",
            "10ms",
            "--relay-retry-cap",
            "2s",
            "--relay-settle-batch-max",
            "9",
            "--reaper-batch-max",
            "11",
            "--reaper-batches-per-tick-max",
            "13",
            "--http-connections-max",
            "17",
            "--body-bytes-max",
            "19",
            "--provider-notification-body-bytes-max",
            "23",
            "--webhook-response-bytes-max",
            "29",
        ]);
        for c in [old, new] {
            assert_eq!(c.shard_batch_max, 7);
            assert_eq!(c.relay.relay_attempts_max, 4);
            assert_eq!(c.relay.relay_retry_base, Duration::from_millis(10));
            assert_eq!(c.relay.relay_retry_cap, Duration::from_secs(2));
            assert_eq!(c.relay.relay_settle_batch_max, 9);
            assert_eq!(c.reaper_batch_max, 11);
            assert_eq!(c.reaper_batches_per_tick_max, 13);
            assert_eq!(c.http_connections_max, 17);
            assert_eq!(c.body_bytes_max, 19);
            assert_eq!(c.outcomes.provider_notification_body_bytes_max, 23);
            assert_eq!(c.webhooks.webhook_response_bytes_max, 29);
        }
    }

    #[test]
    fn the_defaults_are_valid() {
        assert!(parse(&[]).validate().is_ok());
    }
}
