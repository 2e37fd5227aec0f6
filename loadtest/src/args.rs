//! Command line of `payrail-loadtest`: flags, the scenario mix and the
//! loopback-only rule for every address it talks to.

use std::fmt;
use std::net::{IpAddr, ToSocketAddrs};
use std::str::FromStr;
use std::time::Duration;

use clap::{ArgGroup, Parser};
use reqwest::Url;

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

/// The scenarios of the README's load-testing section, one per intent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scenario {
    /// One key, one request, retried with the same key until answered.
    Unique,
    /// Like `Unique`, but the first attempt gives up after a very short time,
    /// usually after the server has already committed.
    Timeout,
    /// Several identical attempts of one key at the same moment.
    Burst,
    /// The key is created, then sent again with a different amount.
    Reuse,
    /// The key is created, then replayed many times, in sequence and at once.
    Storm,
    /// The key is created, then replayed `--storm-size` times one after
    /// another: the replay path at the loop's own concurrency (benchmarks).
    Replay,
}

impl Scenario {
    /// Every scenario, in `--mix` order.
    pub const ALL: [Scenario; 6] = [
        Scenario::Unique,
        Scenario::Timeout,
        Scenario::Burst,
        Scenario::Reuse,
        Scenario::Storm,
        Scenario::Replay,
    ];

    /// The name used in `--mix` and the report.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Unique => "unique",
            Scenario::Timeout => "timeout",
            Scenario::Burst => "burst",
            Scenario::Reuse => "reuse",
            Scenario::Storm => "storm",
            Scenario::Replay => "replay",
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Relative weights of the scenarios, e.g. `unique=70,timeout=10,burst=10,reuse=5,storm=5`.
/// A scenario left out has weight 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mix {
    weights: [u32; 6],
}

impl Mix {
    /// Sum of the weights.
    pub fn total(&self) -> u64 {
        self.weights.iter().map(|&w| u64::from(w)).sum()
    }

    /// The weight of one scenario.
    pub fn weight(&self, s: Scenario) -> u32 {
        self.weights[s as usize]
    }

    /// The scenario a uniform draw `r` in `0..total()` falls on.
    pub fn pick(&self, r: u64) -> Scenario {
        let mut acc = 0u64;
        for s in Scenario::ALL {
            acc += u64::from(self.weight(s));
            if r < acc {
                return s;
            }
        }
        // Only reachable for r >= total(); the last weighted scenario is as good as any.
        Scenario::ALL
            .into_iter()
            .rev()
            .find(|&s| self.weight(s) > 0)
            .unwrap_or(Scenario::Unique)
    }
}

impl FromStr for Mix {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let mut weights = [0u32; Scenario::ALL.len()];
        let mut seen = [false; Scenario::ALL.len()];
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, weight) = part
                .split_once('=')
                .ok_or_else(|| format!("{part:?} is not name=weight"))?;
            let name = name.trim();
            let scenario = Scenario::ALL
                .into_iter()
                .find(|s| s.name() == name)
                .ok_or_else(|| {
                    format!(
                        "unknown scenario {name:?} (known: unique, timeout, burst, reuse, storm, replay)"
                    )
                })?;
            let weight: u32 = weight
                .trim()
                .parse()
                .map_err(|_| format!("weight of {name} must be a whole number, got {weight:?}"))?;
            if weight > 1_000_000 {
                return Err(format!("weight of {name} must be at most 1000000"));
            }
            if std::mem::replace(&mut seen[scenario as usize], true) {
                return Err(format!("{name} appears twice"));
            }
            weights[scenario as usize] = weight;
        }
        let mix = Mix { weights };
        if mix.total() == 0 {
            return Err("at least one weight must be positive".into());
        }
        Ok(mix)
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = Scenario::ALL
            .iter()
            .filter(|&&s| self.weight(s) > 0)
            .map(|&s| format!("{s}={}", self.weight(s)))
            .collect();
        f.write_str(&parts.join(","))
    }
}

/// True for 127.0.0.0/8, ::1 and an IPv4-mapped loopback address.
pub fn is_loopback_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// Accepts an `http`/`https` URL whose host is a loopback address, or
/// `localhost` when it resolves only to loopback addresses. The load must
/// never leave this machine, whatever is typed.
pub fn check_loopback_url(raw: &str) -> Result<Url, String> {
    let url = Url::parse(raw).map_err(|e| format!("{raw:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("{raw:?}: only http and https are supported"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!("{raw:?}: credentials in the URL are not supported"));
    }
    let loopback = match url.host() {
        Some(url::Host::Ipv4(ip)) => is_loopback_ip(ip.into()),
        Some(url::Host::Ipv6(ip)) => is_loopback_ip(ip.into()),
        Some(url::Host::Domain(name)) => {
            localhost_is_loopback(name, url.port_or_known_default().unwrap_or(80))
        }
        None => false,
    };
    if loopback {
        Ok(url)
    } else {
        Err(format!(
            "{raw:?} is not a loopback address; only 127.0.0.0/8, [::1] and localhost are allowed"
        ))
    }
}

/// `localhost` (any case) whose every resolved address is loopback; a hosts
/// file could point it elsewhere. `localhost.` is refused: the fully
/// qualified form skips the hosts file and asks DNS, which may answer anything.
fn localhost_is_loopback(name: &str, port: u16) -> bool {
    if !name.eq_ignore_ascii_case("localhost") {
        return false;
    }
    match (name, port).to_socket_addrs() {
        Ok(addrs) => {
            let addrs: Vec<_> = addrs.collect();
            !addrs.is_empty() && addrs.iter().all(|a| is_loopback_ip(a.ip()))
        }
        Err(_) => false,
    }
}

/// Accepts a Postgres URL whose every host is loopback or a Unix socket.
pub fn check_loopback_database(raw: &str) -> Result<(), String> {
    let config: tokio_postgres::Config = raw
        .parse()
        .map_err(|e| format!("not a Postgres connection string: {e}"))?;
    let hosts = config.get_hosts();
    if hosts.is_empty() {
        return Err("names no host".into());
    }
    for host in hosts {
        match host {
            #[cfg(unix)]
            tokio_postgres::config::Host::Unix(_) => {}
            tokio_postgres::config::Host::Tcp(name) => {
                let ok = match name.parse::<IpAddr>() {
                    Ok(ip) => is_loopback_ip(ip),
                    Err(_) => localhost_is_loopback(name, 5432),
                };
                if !ok {
                    return Err(format!(
                        "host {name:?} is not a loopback address; only 127.0.0.0/8, ::1 and localhost are allowed"
                    ));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_parses_the_documented_format() {
        let mix: Mix = "unique=70,timeout=10,burst=10,reuse=5,storm=5"
            .parse()
            .unwrap();
        assert_eq!(mix.total(), 100);
        assert_eq!(mix.weight(Scenario::Timeout), 10);
        assert_eq!(
            mix.to_string(),
            "unique=70,timeout=10,burst=10,reuse=5,storm=5"
        );
    }

    #[test]
    fn mix_allows_spaces_omissions_and_zero_weights() {
        let mix: Mix = " burst = 3 , storm=0,".parse().unwrap();
        assert_eq!(mix.total(), 3);
        assert_eq!(mix.weight(Scenario::Unique), 0);
        assert_eq!(mix.to_string(), "burst=3");
    }

    #[test]
    fn mix_rejects_bad_input() {
        for bad in [
            "",
            "unique=0",
            "unique",
            "unique=-1",
            "unique=x",
            "bogus=1",
            "unique=1,unique=2",
            "unique=2000000",
        ] {
            assert!(bad.parse::<Mix>().is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn mix_pick_follows_the_weights() {
        let mix: Mix = "unique=2,burst=1,storm=1".parse().unwrap();
        let picks: Vec<_> = (0..mix.total()).map(|r| mix.pick(r)).collect();
        assert_eq!(
            picks,
            [
                Scenario::Unique,
                Scenario::Unique,
                Scenario::Burst,
                Scenario::Storm
            ]
        );
        // Never a zero-weight scenario, even out of range.
        assert_eq!(mix.pick(99), Scenario::Storm);
    }

    #[test]
    fn loopback_urls_are_accepted() {
        for ok in [
            "http://127.0.0.1:8080",
            "http://127.1.2.3/",
            "https://127.0.0.1",
            "http://[::1]:9099",
            "http://[::ffff:127.0.0.1]:80",
            "http://127.1:8080",
        ] {
            assert!(check_loopback_url(ok).is_ok(), "{ok} refused");
        }
    }

    #[test]
    fn localhost_is_accepted_when_it_resolves_to_loopback() {
        // Every sane hosts file maps it to loopback; this guards the name match.
        assert!(check_loopback_url("http://localhost:8080").is_ok());
        assert!(check_loopback_url("http://LOCALHOST:8080").is_ok());
        assert!(check_loopback_url("http://localhost.:8080").is_err());
    }

    #[test]
    fn other_hosts_are_refused() {
        for bad in [
            "http://10.0.0.1:8080",
            "http://192.168.1.10",
            "http://172.16.0.1",
            "http://8.8.8.8",
            "http://0.0.0.0:8080",
            "http://[::]:8080",
            "http://[fe80::1]",
            "http://example.com",
            "http://localhost.example.com",
            "http://127.0.0.1.nip.io",
            "ftp://127.0.0.1",
            "http://user:pw@127.0.0.1",
            "127.0.0.1:8080",
            "not a url",
        ] {
            assert!(check_loopback_url(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn database_urls_must_be_loopback_too() {
        assert!(check_loopback_database("postgres://postgres@127.0.0.1:5432/db").is_ok());
        assert!(check_loopback_database("host=localhost user=postgres").is_ok());
        assert!(check_loopback_database("host=/var/run/postgresql user=postgres").is_ok());
        assert!(check_loopback_database("postgres://u@db.example.com/db").is_err());
        assert!(check_loopback_database("host=10.1.1.1 user=u").is_err());
        assert!(check_loopback_database("host=127.0.0.1,10.1.1.1 user=u").is_err());
        assert!(check_loopback_database("nonsense=").is_err());
    }

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
