//! `payrail-pace`: offers `POST /transfers` at a fixed rate, each request
//! with a new `Idempotency-Key`, and measures every answer's latency from
//! the moment its request was due, not from when it was sent: the open loop
//! of wrk2, free of coordinated omission. A late answer delays the next
//! request on its connection, and that request's wait is counted.
//!
//! It exists because the tail of an open loop on a 2-core machine is as
//! much the client's as the server's: `payrail-loadtest` checks every answer
//! and costs several times the engine's CPU per request, and its threads
//! queue for the same cores. This client does one thing with as little CPU
//! as it can: it writes prepared HTTP/1.1 requests on kept-alive connections
//! and reads the status and the body's length, nothing else. It checks
//! nothing beyond the status: scripts/bench verifies the outcome in
//! Postgres (one transfer per 201).
//!
//!   PAYRAIL_API_KEY=... payrail-pace --target http://127.0.0.1:8080 --rate 9000 --duration 15s
//!
//! It prints one line: `PACE due=N created=N other=N errors=N p50_ms=X
//! p99_ms=X p999_ms=X max_ms=X send_lag_p99_ms=X seconds=X`, where
//! send_lag is how late the client itself sent requests (its own share of
//! the tail). Exit status: 0 when every request got 201, 1 when not, 2 when
//! it could not start.

mod wire;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use hdrhistogram::Histogram;
use tokio::time::Instant;

use crate::wire::{Connection, Request};

/// Flags of `payrail-pace`.
#[derive(Debug, Parser)]
#[command(
    name = "payrail-pace",
    about = "Fixed-rate POST /transfers with latency from each request's due time"
)]
struct Args {
    /// payrail's address, `http://HOST:PORT` (plain HTTP/1.1).
    #[arg(long)]
    target: url::Url,
    /// The client's API key.
    #[arg(long, env = "PAYRAIL_API_KEY", hide_env_values = true)]
    api_key: String,
    /// Requests per second over all connections.
    #[arg(long, value_parser = parse_rate)]
    rate: f64,
    /// How long requests are started.
    #[arg(long, value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Connections; request i goes out on connection i mod this, so each
    /// sends one request every connections/rate seconds.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    connections: u32,
    /// Longest wait for one answer; a later one counts as an error and its
    /// connection is replaced.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    timeout: Duration,
    /// Runtime threads.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    threads: u16,
    /// Prefix of the Idempotency-Keys, so that runs against one database
    /// never share a key.
    #[arg(long, default_value = "pace")]
    run_id: String,
}

fn parse_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 && r <= 1_000_000.0 => Ok(r),
        _ => Err(format!(
            "{s:?} is not a rate between 0 and 1000000 requests/s"
        )),
    }
}

/// The address of `target`, which must be `http` on this machine: like
/// payrail-loadtest, this load never leaves it, whatever is typed, so
/// every address the host resolves to must be a loopback address.
fn loopback_addr(target: &url::Url) -> anyhow::Result<SocketAddr> {
    anyhow::ensure!(
        target.scheme() == "http",
        "--target must be http://HOST:PORT"
    );
    let addrs = target.socket_addrs(|| Some(80))?;
    anyhow::ensure!(
        !addrs.is_empty() && addrs.iter().all(|a| a.ip().to_canonical().is_loopback()),
        "{target} is not a loopback address; only 127.0.0.0/8, [::1] and localhost are allowed"
    );
    Ok(addrs[0])
}

/// What every connection shares: the schedule and the request template.
struct Plan {
    addr: SocketAddr,
    request: Request,
    rate: f64,
    connections: u32,
    start: Instant,
    end: Instant,
    timeout: Duration,
}

impl Plan {
    /// When request `index` is due.
    fn due(&self, index: u64) -> Instant {
        self.start + Duration::from_secs_f64(index as f64 / self.rate)
    }
}

/// One connection's tally.
struct Tally {
    /// Due time to answer, µs.
    latency: Histogram<u64>,
    /// Due time to send, µs: the client's own lateness.
    send_lag: Histogram<u64>,
    due: u64,
    created: u64,
    other: u64,
    errors: u64,
}

impl Tally {
    fn new() -> Self {
        // 1 µs to 100 s at 3 significant digits; record() below saturates.
        let h = || Histogram::new_with_bounds(1, 100_000_000, 3).expect("static histogram bounds");
        Tally {
            latency: h(),
            send_lag: h(),
            due: 0,
            created: 0,
            other: 0,
            errors: 0,
        }
    }

    fn add(&mut self, other: &Tally) {
        // Same bounds on both sides, so adding cannot fail.
        self.latency
            .add(&other.latency)
            .expect("same histogram bounds");
        self.send_lag
            .add(&other.send_lag)
            .expect("same histogram bounds");
        self.due += other.due;
        self.created += other.created;
        self.other += other.other;
        self.errors += other.errors;
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros())
        .unwrap_or(u64::MAX)
        .clamp(1, 100_000_000)
}

/// Sends this connection's share of the schedule, one request at a time.
async fn drive(plan: Arc<Plan>, first: u32) -> Tally {
    let mut tally = Tally::new();
    let mut conn: Option<Connection> = None;
    let mut index = u64::from(first);
    loop {
        let due = plan.due(index);
        if due >= plan.end {
            break;
        }
        tokio::time::sleep_until(due).await;
        tally.due += 1;
        let sent = Instant::now();
        let outcome = tokio::time::timeout(plan.timeout, async {
            if conn.is_none() {
                conn = Some(Connection::open(plan.addr).await?);
            }
            let c = conn.as_mut().expect("opened above");
            c.exchange(&plan.request, index).await
        })
        .await;
        let answered = Instant::now();
        tally.send_lag.saturating_record(micros(sent - due));
        tally.latency.saturating_record(micros(answered - due));
        match outcome {
            Ok(Ok(201)) => tally.created += 1,
            Ok(Ok(status)) => {
                tally.other += 1;
                if tally.other <= 3 {
                    eprintln!("payrail-pace: HTTP {status} for request {index}");
                }
            }
            Ok(Err(e)) => {
                tally.errors += 1;
                conn = None;
                if tally.errors <= 3 {
                    eprintln!("payrail-pace: request {index}: {e}");
                }
            }
            Err(_) => {
                tally.errors += 1;
                conn = None;
                if tally.errors <= 3 {
                    eprintln!(
                        "payrail-pace: request {index}: no answer within {:?}",
                        plan.timeout
                    );
                }
            }
        }
        if conn.as_ref().is_some_and(|c| c.closed_by_server()) {
            conn = None;
        }
        index += u64::from(plan.connections);
    }
    tally
}

async fn run(args: Args) -> anyhow::Result<Tally> {
    let addr = loopback_addr(&args.target)?;
    let host = match args.target.port() {
        Some(p) => format!("{}:{p}", args.target.host_str().unwrap_or("localhost")),
        None => args.target.host_str().unwrap_or("localhost").to_owned(),
    };
    // The first request is due a moment after the connections are opened,
    // so that connecting is not counted as the first answers' latency.
    let start = Instant::now() + Duration::from_millis(200);
    let plan = Arc::new(Plan {
        addr,
        request: Request::new(&host, &args.api_key, &args.run_id),
        rate: args.rate,
        connections: args.connections,
        start,
        end: start + args.duration,
        timeout: args.timeout,
    });
    let tasks: Vec<_> = (0..args.connections)
        .map(|first| tokio::spawn(drive(plan.clone(), first)))
        .collect();
    let mut total = Tally::new();
    for task in tasks {
        total.add(&task.await?);
    }
    assert_eq!(
        total.due,
        total.created + total.other + total.errors,
        "every due request has exactly one outcome"
    );
    Ok(total)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let threads = usize::from(args.threads);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("payrail-pace: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let started = std::time::Instant::now();
    let tally = match runtime.block_on(run(args)) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("payrail-pace: {e:#}");
            return ExitCode::from(2);
        }
    };
    let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "PACE due={} created={} other={} errors={} p50_ms={:.2} p99_ms={:.2} p999_ms={:.2} max_ms={:.2} send_lag_p99_ms={:.2} seconds={:.3}",
        tally.due,
        tally.created,
        tally.other,
        tally.errors,
        ms(&tally.latency, 0.5),
        ms(&tally.latency, 0.99),
        ms(&tally.latency, 0.999),
        tally.latency.max() as f64 / 1000.0,
        ms(&tally.send_lag, 0.99),
        // Less the 200 ms before the first request was due.
        started.elapsed().as_secs_f64() - 0.2,
    );
    if tally.other == 0 && tally.errors == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_targets_are_accepted() {
        for ok in [
            "http://127.0.0.1:8080",
            "http://[::1]:80/",
            "http://127.9.9.9",
        ] {
            assert!(loopback_addr(&ok.parse().unwrap()).is_ok(), "{ok}");
        }
        for bad in [
            "http://10.0.0.1:8080",
            "https://127.0.0.1:8443",
            "http://[::ffff:10.0.0.1]",
            "http://192.0.2.1",
        ] {
            assert!(loopback_addr(&bad.parse().unwrap()).is_err(), "{bad}");
        }
        assert_eq!(
            loopback_addr(&"http://[::ffff:127.0.0.1]:9".parse().unwrap())
                .unwrap()
                .port(),
            9
        );
    }
}
