//! `payrail provider-sim`: an in-memory, idempotent payment provider with fault
//! injection (the README's provider-sim section), the stand-in for a real provider in tests, `payrail dev`
//! and the load test.
//!
//! Routes: `POST /payouts`, `GET /payouts/{id}`, `GET /stats`, `GET /healthz`.
//! Embed it with [`start`] (returns once bound; port 0 works) or run it as the
//! CLI does with [`run`].

pub mod app;
pub mod faults;
pub mod handlers;
pub mod later;
pub mod notifier;
pub mod state;
pub mod wire;

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use actix_web::dev::ServerHandle;
use actix_web::{web, HttpServer};

use self::app::{App, Later};
use self::faults::Faults;
use self::notifier::Notifier;
use self::state::SimState;

/// Flags of `payrail provider-sim`; each also reads a `PAYRAIL_SIM_*` env var.
#[derive(Debug, Clone, PartialEq, clap::Args)]
pub struct SimArgs {
    /// Address to listen on (`host:port`; port 0 picks a free one).
    #[arg(long, env = "PAYRAIL_SIM_LISTEN", default_value = "127.0.0.1:9090")]
    pub listen: String,

    /// Delay added to every decided `POST /payouts` answer, after the payout has
    /// executed, so a client timing out leaves an executed payout behind.
    #[arg(long, env = "PAYRAIL_SIM_LATENCY_MS", default_value_t = 0)]
    pub latency_ms: u64,

    /// Probability (0..=1) of answering `503` with `Retry-After: 1` without
    /// executing or replaying anything.
    #[arg(long, env = "PAYRAIL_SIM_FAIL_RATE", default_value_t = 0.0, value_parser = parse_rate)]
    pub fail_rate: f64,

    /// Probability (0..=1) that a payout executing for the first time is stored
    /// and then its connection dropped without any answer. Replays are always
    /// answered, so a retry learns the outcome.
    #[arg(long, env = "PAYRAIL_SIM_AMBIGUOUS_RATE", default_value_t = 0.0, value_parser = parse_rate)]
    pub ambiguous_rate: f64,

    /// Probability (0..=1) that an executing payout is declined with a random
    /// reason. Destination accounts starting with `decline` are always declined.
    #[arg(long, env = "PAYRAIL_SIM_DECLINE_RATE", default_value_t = 0.0, value_parser = parse_rate)]
    pub decline_rate: f64,

    /// Probability (0..=1) that a repeat of an already executed payout is
    /// answered `403` instead of its stored answer: a provider whose
    /// credentials or routing changed between two attempts. After an
    /// ambiguous first attempt, that `403` proves nothing about the payout.
    #[arg(long, env = "PAYRAIL_SIM_REPEAT_REJECT_RATE", default_value_t = 0.0, value_parser = parse_rate)]
    pub repeat_reject_rate: f64,

    /// Seed of the fault RNG; without it a random seed is chosen and logged.
    #[arg(long, env = "PAYRAIL_SIM_SEED")]
    pub seed: Option<u64>,

    /// Most payout records kept in memory; new ids beyond it get `507`
    /// (repeats of stored ids are still answered).
    #[arg(long, env = "PAYRAIL_SIM_MAX_PAYOUTS", default_value_t = 1_000_000)]
    pub max_payouts: usize,

    /// HTTP worker threads (default: actix's choice, the number of cores).
    #[arg(long, env = "PAYRAIL_SIM_WORKERS")]
    pub workers: Option<usize>,

    /// Probability (0..=1) that a payout executing for the first time is
    /// answered `processing` and decided later, as real payout rails do.
    #[arg(long, env = "PAYRAIL_SIM_ASYNC_RATE", default_value_t = 0.0, value_parser = parse_rate)]
    pub async_rate: f64,

    /// How long a `processing` payout waits for its decision, and a
    /// returned one for its return: uniform in `MIN..MAX` milliseconds.
    #[arg(long, env = "PAYRAIL_SIM_SETTLE_AFTER_MS", default_value = "100..2000", value_parser = parse_ms_range)]
    pub settle_after_ms: (u64, u64),

    /// Probability (0..=1) that a succeeded payout is returned later.
    #[arg(long, env = "PAYRAIL_SIM_RETURN_RATE", default_value_t = 0.0, value_parser = parse_rate)]
    pub return_rate: f64,

    /// Where to send signed notifications of later changes (the engine's
    /// `POST /provider/notifications`); none without it.
    #[arg(long, env = "PAYRAIL_SIM_NOTIFY_URL", requires = "notify_secret")]
    pub notify_url: Option<String>,

    /// The secret notifications are signed with (`whsec_…`).
    #[arg(long, env = "PAYRAIL_SIM_NOTIFY_SECRET", value_parser = crate::domain::webhook::WebhookSecret::parse, hide_env_values = true)]
    pub notify_secret: Option<crate::domain::webhook::WebhookSecret>,

    /// Probability (0..=1) that a notification is sent twice.
    #[arg(long, env = "PAYRAIL_SIM_NOTIFY_DUPLICATE_RATE", default_value_t = 0.0, value_parser = parse_rate)]
    pub notify_duplicate_rate: f64,

    /// Probability (0..=1) that a notification is never sent (the engine's
    /// lookups must catch it).
    #[arg(long, env = "PAYRAIL_SIM_NOTIFY_DROP_RATE", default_value_t = 0.0, value_parser = parse_rate)]
    pub notify_drop_rate: f64,

    /// Probability (0..=1) that a return's notification is never sent: as
    /// if every retry of it were lost (the engine's return lookups must
    /// catch it).
    #[arg(long, env = "PAYRAIL_SIM_NOTIFY_RETURN_DROP_RATE", default_value_t = 0.0, value_parser = parse_rate)]
    pub notify_return_drop_rate: f64,

    /// Probability (0..=1) that a notification is held back so that a later
    /// one overtakes it.
    #[arg(long, env = "PAYRAIL_SIM_NOTIFY_REORDER_RATE", default_value_t = 0.0, value_parser = parse_rate)]
    pub notify_reorder_rate: f64,
}

/// clap value parser for `--settle-after-ms`: `MIN..MAX` (or one number).
pub fn parse_ms_range(s: &str) -> Result<(u64, u64), String> {
    let number = |v: &str| {
        v.trim()
            .parse::<u64>()
            .map_err(|e| format!("{v:?} is not a number of milliseconds: {e}"))
    };
    let (min, max) = match s.split_once("..") {
        Some((a, b)) => (number(a)?, number(b)?),
        None => (number(s)?, number(s)?),
    };
    if min > max {
        return Err(format!("{min} is above {max}"));
    }
    Ok((min, max))
}

impl Default for SimArgs {
    /// The same values as the flags' defaults (a unit test keeps them in sync).
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:9090".into(),
            latency_ms: 0,
            fail_rate: 0.0,
            ambiguous_rate: 0.0,
            decline_rate: 0.0,
            repeat_reject_rate: 0.0,
            seed: None,
            max_payouts: 1_000_000,
            workers: None,
            async_rate: 0.0,
            settle_after_ms: (100, 2000),
            return_rate: 0.0,
            notify_url: None,
            notify_secret: None,
            notify_duplicate_rate: 0.0,
            notify_drop_rate: 0.0,
            notify_return_drop_rate: 0.0,
            notify_reorder_rate: 0.0,
        }
    }
}

/// clap value parser for the `*-rate` flags: a probability in `0..=1`.
pub fn parse_rate(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|e| format!("{s:?} is not a number: {e}"))?;
    check_rate(v)
}

fn check_rate(v: f64) -> Result<f64, String> {
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is not a probability in 0..=1"))
    }
}

impl SimArgs {
    // Re-checked here because embedders build SimArgs directly, bypassing clap.
    fn validate(&self) -> io::Result<()> {
        for (name, v) in [
            ("fail_rate", self.fail_rate),
            ("ambiguous_rate", self.ambiguous_rate),
            ("decline_rate", self.decline_rate),
            ("repeat_reject_rate", self.repeat_reject_rate),
            ("async_rate", self.async_rate),
            ("return_rate", self.return_rate),
            ("notify_duplicate_rate", self.notify_duplicate_rate),
            ("notify_drop_rate", self.notify_drop_rate),
            ("notify_return_drop_rate", self.notify_return_drop_rate),
            ("notify_reorder_rate", self.notify_reorder_rate),
        ] {
            check_rate(v)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{name}: {e}")))?;
        }
        if self.notify_url.is_some() != self.notify_secret.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "notify_url and notify_secret go together",
            ));
        }
        if self.workers == Some(0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "workers must be at least 1",
            ));
        }
        Ok(())
    }
}

/// A running sim. Dropping it stops the server (without waiting); call
/// [`SimServer::stop`] to wait for the shutdown.
pub struct SimServer {
    addr: SocketAddr,
    handle: ServerHandle,
    task: Option<tokio::task::JoinHandle<io::Result<()>>>,
}

impl SimServer {
    /// Wraps a started actix server (also how `payrail webhook-sink` runs).
    pub(crate) fn started(server: actix_web::dev::Server, addr: SocketAddr) -> Self {
        let handle = server.handle();
        let task = tokio::spawn(server);
        Self {
            addr,
            handle,
            task: Some(task),
        }
    }

    /// Serves until Ctrl-C or SIGTERM, then stops gracefully.
    pub(crate) async fn serve_until_signal(self, name: &'static str) -> io::Result<()> {
        let handle = self.handle();
        let stopper = tokio::spawn(async move {
            shutdown_signal().await;
            tracing::info!("{name} stopping");
            handle.stop(true).await;
        });
        let result = self.wait().await;
        stopper.abort();
        result
    }

    /// The bound address (the real port when listening on port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Base URL for clients, e.g. `http://127.0.0.1:40123`. A wildcard listen
    /// address is reported as loopback, since a client cannot connect to
    /// `0.0.0.0`.
    pub fn url(&self) -> String {
        let mut addr = self.addr;
        if addr.ip().is_unspecified() {
            addr.set_ip(match addr {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        format!("http://{addr}")
    }

    /// The actix handle, to stop, pause or resume the server from elsewhere.
    pub fn handle(&self) -> ServerHandle {
        self.handle.clone()
    }

    /// Stops gracefully (in-flight requests finish) and waits until it has.
    pub async fn stop(mut self) -> io::Result<()> {
        self.handle.stop(true).await;
        self.join().await
    }

    /// Waits until the server stops (by its handle, or a fatal error).
    pub async fn wait(mut self) -> io::Result<()> {
        self.join().await
    }

    async fn join(&mut self) -> io::Result<()> {
        match self.task.take() {
            Some(task) => task.await.map_err(io::Error::other)?,
            None => Ok(()),
        }
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        if self.task.is_some() {
            // ServerHandle::stop sends the command when called; the returned
            // future only waits for completion, so dropping it is fine here.
            drop(self.handle.stop(false));
        }
    }
}

/// How long an idle client connection is kept open: a minute, as load
/// balancers in front of real providers commonly do, and longer than a
/// pooled client keeps its idle connections (payrail: 30 s), so the client
/// closes them first. With actix's 5 s, connections a client opened ahead
/// of a burst could be gone before it, and a request sent as the server
/// closes an idle connection meets the close instead of an answer.
const KEEP_ALIVE: Duration = Duration::from_secs(60);

/// Binds and starts the sim in the background and returns once it accepts
/// connections. Must be called inside a Tokio runtime (an actix `System`, as in
/// `#[actix_web::main]`/`#[actix_web::test]`, or plain `#[tokio::main]`).
pub async fn start(args: SimArgs) -> io::Result<SimServer> {
    args.validate()?;
    let seed = args.seed.unwrap_or_else(rand::random);
    let app = web::Data::new(App {
        state: SimState::new(args.max_payouts),
        faults: Faults::new(seed, args.fail_rate, args.ambiguous_rate, args.decline_rate)
            .with_repeat_reject_rate(args.repeat_reject_rate),
        latency: Duration::from_millis(args.latency_ms),
        later: later(&args)?,
    });
    let counter = app.clone();
    let mut server = HttpServer::new(move || {
        actix_web::App::new()
            .app_data(app.clone())
            .configure(handlers::configure)
    })
    .on_connect(move |_, _| counter.state.count_connection())
    .keep_alive(KEEP_ALIVE)
    // Signals are the embedder's business; `run` handles them itself.
    .disable_signals()
    // A sim has no long requests worth waiting for at shutdown.
    .shutdown_timeout(2);
    if let Some(workers) = args.workers {
        server = server.workers(workers);
    }
    let server = server.bind(args.listen.as_str())?;
    let addr = *server
        .addrs()
        .first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::AddrNotAvailable, "bound to no address"))?;
    let server = SimServer::started(server.run(), addr);
    tracing::info!(
        %addr,
        seed,
        fail_rate = args.fail_rate,
        ambiguous_rate = args.ambiguous_rate,
        decline_rate = args.decline_rate,
        latency_ms = args.latency_ms,
        "provider-sim listening"
    );
    Ok(server)
}

fn later(args: &SimArgs) -> io::Result<Later> {
    let notifier = match (&args.notify_url, &args.notify_secret) {
        (Some(url), Some(secret)) => {
            let mut n = Notifier::new(url.clone(), secret.clone())?;
            n.duplicate_rate = args.notify_duplicate_rate;
            n.drop_rate = args.notify_drop_rate;
            n.return_drop_rate = args.notify_return_drop_rate;
            n.reorder_rate = args.notify_reorder_rate;
            Some(n)
        }
        _ => None,
    };
    Ok(Later {
        async_rate: args.async_rate,
        settle_after_ms: args.settle_after_ms,
        return_rate: args.return_rate,
        notifier,
    })
}

/// Starts the sim and serves until Ctrl-C or SIGTERM, then stops gracefully.
pub async fn run(args: SimArgs) -> io::Result<()> {
    start(args).await?.serve_until_signal("provider-sim").await
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        sim: SimArgs,
    }

    #[test]
    fn default_matches_clap_defaults() {
        // Guard against env vars leaking in from the developer's shell.
        if std::env::vars().any(|(k, _)| k.starts_with("PAYRAIL_SIM_")) {
            return;
        }
        assert_eq!(Cli::parse_from(["x"]).sim, SimArgs::default());
    }

    #[test]
    fn rates_are_validated() {
        assert!(Cli::try_parse_from(["x", "--fail-rate", "1.5"]).is_err());
        assert!(Cli::try_parse_from(["x", "--decline-rate", "-0.1"]).is_err());
        assert!(Cli::try_parse_from(["x", "--ambiguous-rate", "NaN"]).is_err());
        assert!(Cli::try_parse_from(["x", "--ambiguous-rate", "nope"]).is_err());
        let cli = Cli::try_parse_from([
            "x",
            "--fail-rate",
            "1",
            "--decline-rate",
            "0.25",
            "--seed",
            "9",
        ])
        .unwrap();
        assert_eq!(
            (cli.sim.fail_rate, cli.sim.decline_rate, cli.sim.seed),
            (1.0, 0.25, Some(9))
        );
    }

    #[test]
    fn programmatic_args_are_validated() {
        let bad = SimArgs {
            fail_rate: 2.0,
            ..SimArgs::default()
        };
        assert!(bad.validate().is_err());
        assert!(SimArgs::default().validate().is_ok());
    }
}
