//! `payrail webhook-sink`: a webhook receiver for tests, the load test and
//! `payrail dev`. It checks every signature and timestamp, fails a chosen
//! share of deliveries on purpose, and counts what it accepted.
//!
//! Routes: `POST` to any path (a delivery), `GET /stats`, `GET /deliveries`.

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use actix_web::{web, HttpRequest, HttpResponse, HttpServer};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::domain::webhook::WebhookSecret;
use crate::sim::{parse_rate, SimServer};
use crate::sync::lock;

/// Largest timestamp skew accepted, as Standard Webhooks recommends.
pub const TOLERANCE: Duration = Duration::from_secs(300);

/// Flags of `payrail webhook-sink`.
#[derive(Debug, Clone, clap::Args)]
pub struct SinkArgs {
    /// Address to listen on (`host:port`; port 0 picks a free one).
    #[arg(long, env = "PAYRAIL_SINK_LISTEN", default_value = "127.0.0.1:9191")]
    pub listen: String,
    /// The endpoint's signing secret (`whsec_…`).
    #[arg(long, env = "PAYRAIL_SINK_SECRET", value_parser = WebhookSecret::parse)]
    pub secret: WebhookSecret,
    /// Probability (0..=1) of answering a well-signed delivery `500`.
    #[arg(long, env = "PAYRAIL_SINK_FAIL_RATE", default_value_t = 0.0, value_parser = parse_rate)]
    pub fail_rate: f64,
    /// Seed of the failure RNG (random when absent).
    #[arg(long, env = "PAYRAIL_SINK_SEED")]
    pub seed: Option<u64>,
    /// Delay before answering each delivery, in milliseconds.
    #[arg(long, env = "PAYRAIL_SINK_LATENCY_MS", default_value_t = 0)]
    pub latency_ms: u64,
    /// Most distinct event ids remembered; past it new ids are answered `507`.
    #[arg(long, env = "PAYRAIL_SINK_MAX_EVENTS", default_value_t = 1_000_000)]
    pub max_events: usize,
    /// Print each accepted event's body on standard output.
    #[arg(long)]
    pub print: bool,
}

/// `GET /stats`.
#[derive(Debug, Default, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct SinkStats {
    /// Deliveries accepted (`2xx`), repeats included.
    pub received: u64,
    /// Distinct `webhook-id`s accepted.
    pub distinct_ids: u64,
    /// Requests refused with `401`: bad or missing signature, or a timestamp
    /// more than 5 minutes off.
    pub bad_signatures: u64,
    /// Well-signed deliveries answered `500` on purpose.
    pub failed_on_purpose: u64,
    /// Arrivals of an id while another arrival of the same id was still
    /// being answered (two senders at once).
    pub overlapping: u64,
}

/// One accepted event, for `GET /deliveries`.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
pub struct SinkEvent {
    /// The `webhook-id`.
    pub id: String,
    /// The event's `type`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `data.object.id`.
    pub transfer_id: String,
    /// `data.object.status`.
    pub status: String,
    /// `data.sequence`: the transfer's status changes up to this one
    /// (absent in events of engines before asynchronous payouts).
    #[serde(default)]
    pub sequence: Option<i64>,
    /// Times it was accepted.
    pub count: u64,
}

struct Sink {
    secret: WebhookSecret,
    fail_rate: f64,
    latency: Duration,
    max_events: usize,
    print: bool,
    state: Mutex<SinkState>,
}

struct SinkState {
    rng: StdRng,
    stats: SinkStats,
    events: HashMap<String, SinkEvent>,
    answering: HashSet<String>,
}

/// Checks a delivery's headers and signature; the id when it is valid.
fn verified<'a>(secret: &WebhookSecret, req: &'a HttpRequest, body: &[u8]) -> Option<&'a str> {
    let header = |name: &str| req.headers().get(name).and_then(|v| v.to_str().ok());
    let id = header("webhook-id")?;
    let timestamp: i64 = header("webhook-timestamp")?.parse().ok()?;
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .ok()?
        .as_secs() as i64;
    if (now - timestamp).unsigned_abs() > TOLERANCE.as_secs() {
        return None;
    }
    secret
        .verify(header("webhook-signature")?, id, timestamp, body)
        .then_some(id)
}

#[derive(serde::Deserialize)]
struct EventShape {
    #[serde(rename = "type")]
    kind: String,
    data: DataShape,
}

#[derive(serde::Deserialize)]
struct DataShape {
    object: ObjectShape,
    sequence: Option<i64>,
}

#[derive(serde::Deserialize)]
struct ObjectShape {
    id: String,
    status: String,
}

async fn deliver(sink: web::Data<Sink>, req: HttpRequest, body: web::Bytes) -> HttpResponse {
    let Some(id) = verified(&sink.secret, &req, &body) else {
        lock(&sink.state).stats.bad_signatures += 1;
        return HttpResponse::Unauthorized().body("bad signature or timestamp");
    };
    let id = id.to_owned();
    let Ok(event) = serde_json::from_slice::<EventShape>(&body) else {
        return HttpResponse::BadRequest().body("not an event");
    };
    {
        let mut state = lock(&sink.state);
        if !state.answering.insert(id.clone()) {
            state.stats.overlapping += 1;
        }
    }
    if !sink.latency.is_zero() {
        tokio::time::sleep(sink.latency).await;
    }
    let mut state = lock(&sink.state);
    state.answering.remove(&id);
    if sink.fail_rate > 0.0 && state.rng.gen_bool(sink.fail_rate) {
        state.stats.failed_on_purpose += 1;
        return HttpResponse::InternalServerError().body("failing on purpose");
    }
    let known = state.events.len();
    let SinkState { events, stats, .. } = &mut *state;
    match events.get_mut(&id) {
        Some(seen) => seen.count += 1,
        None if known >= sink.max_events => {
            return HttpResponse::InsufficientStorage().body("sink full")
        }
        None => {
            events.insert(
                id.clone(),
                SinkEvent {
                    id: id.clone(),
                    kind: event.kind,
                    transfer_id: event.data.object.id,
                    status: event.data.object.status,
                    sequence: event.data.sequence,
                    count: 1,
                },
            );
            stats.distinct_ids += 1;
            if sink.print {
                println!(
                    "webhook received ({}, signature valid): {}",
                    events[&id].kind,
                    String::from_utf8_lossy(&body)
                );
            }
        }
    }
    stats.received += 1;
    HttpResponse::NoContent().finish()
}

async fn stats(sink: web::Data<Sink>) -> HttpResponse {
    HttpResponse::Ok().json(lock(&sink.state).stats.clone())
}

async fn deliveries(sink: web::Data<Sink>) -> HttpResponse {
    let events: Vec<SinkEvent> = lock(&sink.state).events.values().cloned().collect();
    HttpResponse::Ok().json(events)
}

/// Binds and starts the sink in the background; returns once it accepts
/// connections.
pub async fn start(args: SinkArgs) -> io::Result<SimServer> {
    let seed = args.seed.unwrap_or_else(rand::random);
    let sink = web::Data::new(Sink {
        secret: args.secret,
        fail_rate: args.fail_rate,
        latency: Duration::from_millis(args.latency_ms),
        max_events: args.max_events,
        print: args.print,
        state: Mutex::new(SinkState {
            rng: StdRng::seed_from_u64(seed),
            stats: SinkStats::default(),
            events: HashMap::new(),
            answering: HashSet::new(),
        }),
    });
    let server = HttpServer::new(move || {
        actix_web::App::new()
            .app_data(sink.clone())
            .app_data(web::PayloadConfig::new(1024 * 1024))
            .route("/stats", web::get().to(stats))
            .route("/deliveries", web::get().to(deliveries))
            .default_service(web::post().to(deliver))
    })
    .disable_signals()
    .shutdown_timeout(2)
    .workers(2)
    .bind(args.listen.as_str())?;
    let addr = *server
        .addrs()
        .first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::AddrNotAvailable, "bound to no address"))?;
    tracing::info!(%addr, seed, fail_rate = args.fail_rate, "webhook-sink listening");
    Ok(SimServer::started(server.run(), addr))
}

/// Runs the sink until Ctrl-C or SIGTERM.
pub async fn run(args: SinkArgs) -> io::Result<()> {
    start(args).await?.serve_until_signal("webhook-sink").await
}
