//! Command line of `payrail-loadtest`: its flags and what clap cannot check
//! about them (the scenario mix is parsed in `mix`, the address rules live in
//! `loopback`).

use std::time::Duration;

use clap::{ArgGroup, Parser};

use crate::loopback::{check_loopback_database, check_loopback_url};
use crate::mix::Mix;

/// Drives `POST /transfers` like a fleet of retrying mobile apps, then reads
/// everything back and checks payrail's invariants (the README's load-testing section).
///
/// Only loopback addresses are ever contacted, and every phase is bounded in
/// count and time, so a run always ends by itself. Exit status: 0 when every
/// invariant held, 1 when one broke, 2 on bad flags or when the run could not
/// be set up.
#[derive(Debug, Clone, Parser)]
#[command(name = "payrail-loadtest", version)]
#[command(group(ArgGroup::new("auth").args(["api_key", "create_client"])))]
pub struct Args {
    /// Base URL of payrail; only loopback hosts are accepted.
    #[arg(
        long,
        env = "PAYRAIL_LOADTEST_TARGET",
        default_value = "http://127.0.0.1:8080"
    )]
    pub target: String,

    /// API key of an existing client. Verification then only looks at the
    /// idempotency keys this run sent.
    #[arg(long, env = "PAYRAIL_LOADTEST_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,

    /// Create a fresh client in the database (needs --database-url), so that
    /// every transfer of the client must come from this run.
    #[arg(
        long,
        env = "PAYRAIL_LOADTEST_CREATE_CLIENT",
        requires = "database_url"
    )]
    pub create_client: bool,

    /// Postgres URL, for --create-client only; only loopback hosts (or a Unix
    /// socket) are accepted.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,

    /// How long new intents are started.
    #[arg(long, env = "PAYRAIL_LOADTEST_DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    pub duration: Duration,

    /// Most intents started; the run stops at this or --duration, whichever
    /// comes first.
    #[arg(long, env = "PAYRAIL_LOADTEST_REQUESTS", default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub requests: u64,

    /// Closed loop: this many workers, each starting its next intent when the
    /// previous one has finished.
    #[arg(long, env = "PAYRAIL_LOADTEST_CONCURRENCY", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub concurrency: u32,

    /// Open loop: start intents at this fixed rate per second whether or not
    /// earlier ones finished; latency counts from the scheduled start.
    #[arg(long, env = "PAYRAIL_LOADTEST_RATE", conflicts_with = "concurrency")]
    pub rate: Option<f64>,

    /// Open loop only: most intents in flight; a scheduled intent beyond it is
    /// dropped (and counted) instead of queued.
    #[arg(long, env = "PAYRAIL_LOADTEST_MAX_IN_FLIGHT", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_in_flight: u32,

    /// Weights of the scenarios: unique (one key, retried), timeout (first
    /// attempt abandoned early), burst (concurrent duplicates), reuse (same key,
    /// changed body), storm (many replays of a created key, half at once), replay (sequential replays of a created key).
    #[arg(
        long,
        env = "PAYRAIL_LOADTEST_MIX",
        default_value = "unique=70,timeout=10,burst=10,reuse=5,storm=5"
    )]
    pub mix: Mix,

    /// Most attempts per intent (per sender, for bursts and storms).
    #[arg(long, env = "PAYRAIL_LOADTEST_MAX_ATTEMPTS", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub max_attempts: u32,

    /// Upper bound of the short timeout of a `timeout` intent's first attempt;
    /// each such attempt draws its timeout from 1ms up to this.
    #[arg(long, env = "PAYRAIL_LOADTEST_CLIENT_TIMEOUT", default_value = "5ms", value_parser = humantime::parse_duration)]
    pub client_timeout: Duration,

    /// Timeout of every other attempt, body included.
    #[arg(long, env = "PAYRAIL_LOADTEST_REQUEST_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub request_timeout: Duration,

    /// Longest wait honoured from a `Retry-After` header.
    #[arg(long, env = "PAYRAIL_LOADTEST_MAX_RETRY_AFTER", default_value = "2s", value_parser = humantime::parse_duration)]
    pub max_retry_after: Duration,

    /// Concurrent identical attempts of a `burst` intent.
    #[arg(long, env = "PAYRAIL_LOADTEST_BURST_SIZE", default_value_t = 5, value_parser = clap::value_parser!(u32).range(2..=100))]
    pub burst_size: u32,

    /// Replays of a `storm` intent after its creation (half one after another,
    /// half at once), and of a `replay` intent (all one after another).
    #[arg(long, env = "PAYRAIL_LOADTEST_STORM_SIZE", default_value_t = 20, value_parser = clap::value_parser!(u32).range(2..=1000))]
    pub storm_size: u32,

    /// Percentage of intents paying a `decline…` account, which provider-sim
    /// always declines, so the `failed` path is exercised too.
    #[arg(long, env = "PAYRAIL_LOADTEST_DECLINE_PERCENT", default_value_t = 5, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub decline_percent: u8,

    /// Seed for scenario choice, bodies and timeouts (keys are always fresh
    /// UUID v4s); printed in the report so a run can be repeated.
    #[arg(long, env = "PAYRAIL_LOADTEST_SEED")]
    pub seed: Option<u64>,

    /// provider-sim base URL: enables waiting for every transfer to settle and
    /// checking one provider execution per transfer. Loopback only.
    #[arg(long, env = "PAYRAIL_LOADTEST_PROVIDER_URL")]
    pub provider_url: Option<String>,

    /// With --provider-url: how long to wait for this run's transfers to leave
    /// `pending` after the load.
    #[arg(long, env = "PAYRAIL_LOADTEST_DRAIN_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration)]
    pub drain_timeout: Duration,

    /// `payrail webhook-sink` base URL, registered (by whoever set the run
    /// up) as the client's webhook endpoint: after the drain, every final
    /// transfer of the run must be announced there exactly once, validly
    /// signed, and no pending one. Needs --provider-url. Loopback only.
    #[arg(long, env = "PAYRAIL_LOADTEST_WEBHOOK_SINK", requires = "provider_url")]
    pub webhook_sink: Option<String>,

    /// Bound on reading everything back (after the drain).
    #[arg(long, env = "PAYRAIL_LOADTEST_VERIFY_TIMEOUT", default_value = "120s", value_parser = humantime::parse_duration)]
    pub verify_timeout: Duration,

    /// Instead of transfers, `GET /healthz` with the same workers, client and
    /// histogram: the HTTP ceiling the benchmark compares replays with.
    /// Closed loop only; no API key is needed and nothing is verified.
    #[arg(long, env = "PAYRAIL_LOADTEST_HEALTHZ", conflicts_with_all = ["rate", "api_key", "create_client", "provider_url"])]
    pub healthz: bool,

    /// Print only a JSON report on stdout.
    #[arg(long, env = "PAYRAIL_LOADTEST_JSON")]
    pub json: bool,
}

impl Args {
    /// Checks what clap cannot: address rules and value ranges of durations
    /// and floats. The message is meant for the user as is.
    pub fn validate(&self) -> Result<(), String> {
        if !self.healthz && self.api_key.is_none() && !self.create_client {
            return Err("one of --api-key or --create-client is required".into());
        }
        check_loopback_url(&self.target).map_err(|e| format!("--target: {e}"))?;
        if let Some(url) = &self.provider_url {
            check_loopback_url(url).map_err(|e| format!("--provider-url: {e}"))?;
        }
        if let Some(url) = &self.webhook_sink {
            check_loopback_url(url).map_err(|e| format!("--webhook-sink: {e}"))?;
        }
        if self.create_client {
            let url = self.database_url.as_deref().unwrap_or_default();
            check_loopback_database(url).map_err(|e| format!("--database-url: {e}"))?;
        }
        if let Some(rate) = self.rate {
            if !(rate.is_finite() && rate > 0.0 && rate <= 1_000_000.0) {
                return Err("--rate must be a number of intents per second in (0, 1000000]".into());
            }
        }
        if self.mix.total() == 0 {
            return Err("--mix: at least one weight must be positive".into());
        }
        let positive = [
            ("--duration", self.duration),
            ("--client-timeout", self.client_timeout),
            ("--request-timeout", self.request_timeout),
        ];
        if let Some((flag, _)) = positive.iter().find(|(_, d)| d.is_zero()) {
            return Err(format!("{flag} must be longer than zero"));
        }
        // Unbounded durations would defeat the hard deadline.
        let day = Duration::from_secs(86_400);
        let bounded = [
            ("--duration", self.duration),
            ("--request-timeout", self.request_timeout),
            ("--max-retry-after", self.max_retry_after),
            ("--drain-timeout", self.drain_timeout),
            ("--verify-timeout", self.verify_timeout),
        ];
        if let Some((flag, _)) = bounded.iter().find(|(_, d)| *d > day) {
            return Err(format!("{flag} must be at most 24h"));
        }
        Ok(())
    }

    /// How long any intent may keep retrying after the load window closes: a
    /// full budget of attempts, each waiting its longest, so a well-behaved
    /// intent is never cut short, yet the run still ends by itself.
    pub fn grace(&self) -> Duration {
        (self.request_timeout + self.max_retry_after) * self.max_attempts
    }

    /// The moment past which the process exits whatever it is doing.
    pub fn hard_deadline(&self) -> Duration {
        // The slack covers client creation, stats reads and printing.
        self.duration
            + self.grace()
            + self.drain_timeout
            + self.verify_timeout
            + Duration::from_secs(30)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_parse_and_auth_is_required_exactly_once() {
        let none = Args::try_parse_from(["payrail-loadtest"]).unwrap();
        assert!(none.validate().is_err(), "transfers need a client");
        let ceiling = Args::try_parse_from(["payrail-loadtest", "--healthz"]).unwrap();
        assert!(ceiling.validate().is_ok(), "/healthz needs none");
        assert!(Args::try_parse_from(["payrail-loadtest", "--healthz", "--api-key", "k"]).is_err());
        let a = Args::try_parse_from(["payrail-loadtest", "--api-key", "k"]).unwrap();
        assert_eq!(a.duration, Duration::from_secs(10));
        assert_eq!(a.concurrency, 32);
        assert!(a.validate().is_ok());
        assert!(Args::try_parse_from([
            "payrail-loadtest",
            "--api-key",
            "k",
            "--create-client",
            "--database-url",
            "postgres://127.0.0.1/x"
        ])
        .is_err());
        assert!(Args::try_parse_from([
            "payrail-loadtest",
            "--api-key",
            "k",
            "--rate",
            "5",
            "--concurrency",
            "3"
        ])
        .is_err());
        let bad = Args::try_parse_from([
            "payrail-loadtest",
            "--api-key",
            "k",
            "--target",
            "http://10.0.0.1",
        ])
        .unwrap();
        assert!(bad.validate().unwrap_err().contains("--target"));
        let bad = Args::try_parse_from([
            "payrail-loadtest",
            "--api-key",
            "k",
            "--provider-url",
            "http://example.com",
        ])
        .unwrap();
        assert!(bad.validate().unwrap_err().contains("--provider-url"));
        let bad =
            Args::try_parse_from(["payrail-loadtest", "--api-key", "k", "--rate", "0"]).unwrap();
        assert!(bad.validate().is_err());
    }

    #[test]
    fn hard_deadline_covers_every_phase() {
        let a = Args::try_parse_from(["payrail-loadtest", "--api-key", "k", "--duration", "20s"])
            .unwrap();
        assert!(a.hard_deadline() > a.duration + a.grace() + a.drain_timeout + a.verify_timeout);
    }
}
