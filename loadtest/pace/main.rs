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
//! as it can: it writes requests from a prepared head on kept-alive
//! connections and reads the status and the body's length, nothing else.
//! It checks nothing beyond the status: scripts/bench verifies the outcome
//! in Postgres (one transfer per 201).
//!
//!   PAYRAIL_API_KEY=... payrail-pace --target http://127.0.0.1:8080 --rate 9000 --duration 15s
//!
//! It prints one line: `PACE due=N created=N other=N errors=N p50_ms=X
//! p99_ms=X p999_ms=X max_ms=X send_lag_p50_ms=X send_lag_p99_ms=X
//! seconds=X`, where send_lag is how late the client itself sent requests
//! (its own share of the figures). Exit status: 0 when every request got
//! 201, 1 when not, 2 when it could not start.

mod wire;

// payrail-loadtest's rule for the addresses it may load: loopback only.
// Its database check is not needed here.
#[allow(dead_code)]
#[path = "../src/loopback.rs"]
mod loopback;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use hdrhistogram::Histogram;
use tokio::time::Instant;

use crate::wire::{is_closed_before_answer, Connection, Request};

/// Most requests per second.
const RATE_MAX: f64 = 1_000_000.0;
/// Longest run.
const DURATION_MAX: Duration = Duration::from_secs(3600);
/// Longest wait for one answer.
const TIMEOUT_MAX: Duration = Duration::from_secs(60);
/// Longest latency held exactly (µs); longer ones saturate. Above
/// `TIMEOUT_MAX`, so only a bug could reach it.
const LATENCY_MAX_US: u64 = 100_000_000;
/// Failures printed per connection; the rest are only counted.
const FAILURES_PRINTED: u64 = 3;

/// Flags of `payrail-pace`.
#[derive(Debug, Parser)]
#[command(
    name = "payrail-pace",
    about = "Fixed-rate POST /transfers with latency from each request's due time"
)]
struct Args {
    /// payrail's address, `http://HOST:PORT` on this machine (plain HTTP/1.1).
    #[arg(long, value_parser = parse_target)]
    target: url::Url,
    /// The client's API key. Its per-client rate limit (serve's
    /// `--rate-limit`, 1000/s by default) applies: raise it above `--rate`.
    #[arg(long, env = "PAYRAIL_API_KEY", hide_env_values = true, value_parser = parse_api_key)]
    api_key: String,
    /// Requests per second over all connections.
    #[arg(long, value_parser = parse_rate)]
    rate: f64,
    /// How long requests are due (at most 1 h).
    #[arg(long, value_parser = parse_duration)]
    duration: Duration,
    /// Connections, all opened before the first request is due; request i
    /// goes out on connection i mod this, so each sends one request every
    /// connections/rate seconds. They also cap the requests in flight: the
    /// rate is offered as long as answers take less than connections/rate.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1024))]
    connections: u32,
    /// Longest time from a request's due time to its answer (at most 60 s);
    /// past it the request counts as an error and its connection is replaced.
    /// It also bounds the run: every request is settled by its due time plus this.
    #[arg(long, default_value = "10s", value_parser = parse_timeout)]
    timeout: Duration,
    /// Runtime threads.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    threads: u16,
    /// Prefix of the Idempotency-Keys (letters, digits, `-`, `_`; at most
    /// 64), so that runs against one database never share a key. Default: a
    /// new UUID v7 per run.
    #[arg(long, value_parser = parse_run_id)]
    run_id: Option<String>,
}

/// A loopback `http` URL with no path, query or credentials.
fn parse_target(s: &str) -> Result<url::Url, String> {
    let url = loopback::check_loopback_url(s)?;
    if url.scheme() != "http" {
        return Err(format!("{s:?}: payrail-pace speaks plain http only"));
    }
    if !matches!(url.path(), "" | "/") || url.query().is_some() || url.fragment().is_some() {
        return Err(format!(
            "{s:?}: give only http://HOST:PORT; the path is /transfers"
        ));
    }
    Ok(url)
}

/// Requests per second, above 0 and at most `RATE_MAX`.
fn parse_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 && r <= RATE_MAX => Ok(r),
        _ => Err(format!(
            "{s:?} is not a rate above 0 and at most {RATE_MAX} requests/s"
        )),
    }
}

fn parse_bounded(s: &str, max: Duration) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{s:?}: {e}"))?;
    if d.is_zero() || d > max {
        return Err(format!(
            "{s:?} is not above 0 and at most {}",
            humantime::format_duration(max)
        ));
    }
    Ok(d)
}

/// A run's length, above 0 and at most `DURATION_MAX`.
fn parse_duration(s: &str) -> Result<Duration, String> {
    parse_bounded(s, DURATION_MAX)
}

/// An answer's time bound, above 0 and at most `TIMEOUT_MAX`.
fn parse_timeout(s: &str) -> Result<Duration, String> {
    parse_bounded(s, TIMEOUT_MAX)
}

/// Printable ASCII without spaces, as a header value needs.
fn parse_api_key(s: &str) -> Result<String, String> {
    if s.is_empty() || s.len() > 256 || !s.bytes().all(|b| b.is_ascii_graphic()) {
        return Err("the API key must be 1 to 256 printable ASCII characters".to_owned());
    }
    Ok(s.to_owned())
}

/// Letters, digits, `-` and `_`, so keys and bodies need no escaping.
fn parse_run_id(s: &str) -> Result<String, String> {
    if s.is_empty()
        || s.len() > 64
        || !s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(format!("{s:?}: 1 to 64 letters, digits, '-' or '_'"));
    }
    Ok(s.to_owned())
}

/// What every connection shares: where, what, and the schedule.
struct Plan {
    addrs: Vec<SocketAddr>,
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

/// The figures of some requests.
struct Tally {
    /// Due time to the end of the exchange (answer, error or timeout), µs.
    latency: Histogram<u64>,
    /// Due time to send, µs: the client's own lateness.
    send_lag: Histogram<u64>,
    /// Requests due.
    due: u64,
    /// Answered `201`.
    created: u64,
    /// Answered with another status.
    other: u64,
    /// Not answered: a connection error, an answer it could not read, or
    /// no answer by the due time plus `--timeout`.
    errors: u64,
}

impl Tally {
    fn new() -> Self {
        let h =
            || Histogram::new_with_bounds(1, LATENCY_MAX_US, 3).expect("static histogram bounds");
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

/// `d` in whole µs, within the histograms' bounds.
fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros())
        .unwrap_or(u64::MAX)
        .clamp(1, LATENCY_MAX_US)
}

/// Sends request `index` on `conn`, opening a connection if there is none.
/// A kept-alive connection the server closed while it was idle is replaced
/// once and the request sent again: the same key makes that safe, and the
/// time it took still counts from the due time.
async fn send(conn: &mut Option<Connection>, plan: &Plan, index: u64) -> std::io::Result<u16> {
    let reused = conn.is_some();
    if conn.is_none() {
        *conn = Some(Connection::open(&plan.addrs).await?);
    }
    let c = conn.as_mut().expect("opened above");
    match c.exchange(&plan.request, index).await {
        Err(e) if reused && is_closed_before_answer(&e) => {
            *conn = Some(Connection::open(&plan.addrs).await?);
            conn.as_mut()
                .expect("opened above")
                .exchange(&plan.request, index)
                .await
        }
        outcome => outcome,
    }
}

/// Sends this connection's share of the schedule, one request at a time,
/// each answered (or given up) by its due time plus `--timeout`.
async fn drive(plan: Arc<Plan>, first: u32, conn: Connection) -> Tally {
    let mut tally = Tally::new();
    let mut conn = Some(conn);
    let mut index = u64::from(first);
    loop {
        let due = plan.due(index);
        if due >= plan.end {
            break;
        }
        tokio::time::sleep_until(due).await;
        tally.due += 1;
        let sent = Instant::now();
        // Bounded from the due time, not from the send: requests queued
        // behind a server that stopped answering fail at once, so a run
        // ends by its end plus the timeout whatever the server does.
        let outcome =
            tokio::time::timeout_at(due + plan.timeout, send(&mut conn, &plan, index)).await;
        let finished = Instant::now();
        tally.send_lag.saturating_record(micros(sent - due));
        tally.latency.saturating_record(micros(finished - due));
        let failure = match outcome {
            Ok(Ok(201)) => {
                tally.created += 1;
                None
            }
            Ok(Ok(status)) => {
                tally.other += 1;
                (tally.other <= FAILURES_PRINTED).then(|| format!("HTTP {status}"))
            }
            Ok(Err(e)) => {
                tally.errors += 1;
                conn = None;
                (tally.errors <= FAILURES_PRINTED).then(|| e.to_string())
            }
            Err(_) => {
                tally.errors += 1;
                conn = None;
                (tally.errors <= FAILURES_PRINTED)
                    .then(|| format!("no answer within {:?} of its due time", plan.timeout))
            }
        };
        if let Some(failure) = failure {
            eprintln!("payrail-pace: request {index}: {failure}");
        }
        if conn.as_ref().is_some_and(Connection::closed_by_server) {
            conn = None;
        }
        index += u64::from(plan.connections);
    }
    tally
}

/// Opens every connection, then runs the schedule; returns the figures and
/// the time from the first due request to the last exchange's end.
async fn run(args: Args) -> anyhow::Result<(Tally, Duration)> {
    let addrs = args.target.socket_addrs(|| None)?;
    anyhow::ensure!(!addrs.is_empty(), "{} resolves to no address", args.target);
    let host = match args.target.port() {
        Some(p) => format!("{}:{p}", args.target.host_str().unwrap_or("localhost")),
        None => args.target.host_str().unwrap_or("localhost").to_owned(),
    };
    let run_id = args
        .run_id
        .unwrap_or_else(|| uuid::Uuid::now_v7().simple().to_string());
    let mut conns = Vec::with_capacity(args.connections as usize);
    for _ in 0..args.connections {
        conns.push(Connection::open(&addrs).await?);
    }
    // Connecting is done, so it is no request's latency.
    let start = Instant::now();
    let plan = Arc::new(Plan {
        addrs,
        request: Request::new(&host, &args.api_key, &run_id),
        rate: args.rate,
        connections: args.connections,
        start,
        end: start + args.duration,
        timeout: args.timeout,
    });
    let tasks: Vec<_> = conns
        .into_iter()
        .zip(0..)
        .map(|(conn, first)| tokio::spawn(drive(plan.clone(), first, conn)))
        .collect();
    let mut total = Tally::new();
    for task in tasks {
        total.add(&task.await?);
    }
    let elapsed = start.elapsed();
    assert_eq!(
        total.due,
        total.created + total.other + total.errors,
        "every due request has exactly one outcome"
    );
    Ok((total, elapsed))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(usize::from(args.threads))
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("payrail-pace: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let (tally, elapsed) = match runtime.block_on(run(args)) {
        Ok(done) => done,
        Err(e) => {
            eprintln!("payrail-pace: {e:#}");
            return ExitCode::from(2);
        }
    };
    let ms = |h: &Histogram<u64>, q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "PACE due={} created={} other={} errors={} p50_ms={:.2} p99_ms={:.2} p999_ms={:.2} max_ms={:.2} send_lag_p50_ms={:.2} send_lag_p99_ms={:.2} seconds={:.3}",
        tally.due,
        tally.created,
        tally.other,
        tally.errors,
        ms(&tally.latency, 0.5),
        ms(&tally.latency, 0.99),
        ms(&tally.latency, 0.999),
        tally.latency.max() as f64 / 1000.0,
        ms(&tally.send_lag, 0.5),
        ms(&tally.send_lag, 0.99),
        elapsed.as_secs_f64(),
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
    use std::sync::atomic::{AtomicU64, Ordering};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    use tokio::net::{TcpListener, TcpStream};

    #[test]
    fn only_plain_http_loopback_targets_without_a_path_are_accepted() {
        for ok in [
            "http://127.0.0.1:8080",
            "http://[::1]:80/",
            "http://localhost:9",
        ] {
            assert!(parse_target(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://10.0.0.1:8080",
            "http://[::ffff:10.0.0.1]",
            "http://localhost.:80",
            "https://127.0.0.1:8443",
            "http://127.0.0.1:8080/transfers",
            "http://127.0.0.1:8080/?a=1",
            "http://u:p@127.0.0.1:8080",
        ] {
            assert!(parse_target(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn keys_and_header_values_that_would_need_escaping_are_refused() {
        assert!(parse_run_id("bench_r1-2").is_ok());
        for bad in ["", "a b", "a\"b", "a\r\nb", &"x".repeat(65)] {
            assert!(parse_run_id(bad).is_err(), "{bad:?}");
        }
        assert!(parse_api_key("pk_live_abc").is_ok());
        assert!(parse_api_key("a b").is_err() && parse_api_key("a\nb").is_err());
        assert!(parse_duration("0s").is_err() && parse_duration("2h").is_err());
        assert!(
            parse_rate("0").is_err() && parse_rate("NaN").is_err() && parse_rate("1e7").is_err()
        );
    }

    /// A server that answers every request 201 once its body is in: the
    /// first answer of the whole server after `first_delay`; after every
    /// `close_every`-th answer it closes the connection, saying so in that
    /// answer (`Connection: close`) when `announce`.
    async fn server(
        first_delay: Duration,
        close_every: u64,
        announce: bool,
    ) -> (SocketAddr, Arc<AtomicU64>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let answered = Arc::new(AtomicU64::new(0));
        let count = answered.clone();
        tokio::spawn(async move {
            loop {
                let (socket, _) = listener.accept().await.unwrap();
                tokio::spawn(serve(
                    socket,
                    count.clone(),
                    first_delay,
                    close_every,
                    announce,
                ));
            }
        });
        (addr, answered)
    }

    async fn serve(
        mut socket: TcpStream,
        count: Arc<AtomicU64>,
        first_delay: Duration,
        close_every: u64,
        announce: bool,
    ) {
        let mut buf = Vec::new();
        loop {
            // Read one whole request: its head, then Content-Length bytes.
            let whole = loop {
                let mut headers = [httparse::EMPTY_HEADER; 16];
                let mut req = httparse::Request::new(&mut headers);
                if let Ok(httparse::Status::Complete(head)) = req.parse(&buf) {
                    let len: usize = req
                        .headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                        .map(|h| std::str::from_utf8(h.value).unwrap().parse().unwrap())
                        .unwrap();
                    if buf.len() >= head + len {
                        break head + len;
                    }
                }
                if socket.read_buf(&mut buf).await.unwrap_or(0) == 0 {
                    return;
                }
            };
            buf.drain(..whole);
            let n = count.fetch_add(1, Ordering::SeqCst) + 1;
            if n == 1 {
                tokio::time::sleep(first_delay).await;
            }
            let close = n.is_multiple_of(close_every);
            let answer = if close && announce {
                &b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}"[..]
            } else {
                b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n{}"
            };
            if socket.write_all(answer).await.is_err() || close {
                return;
            }
        }
    }

    async fn pace(addr: SocketAddr, rate: f64, duration: Duration, connections: u32) -> Tally {
        let args = Args::parse_from([
            "payrail-pace".to_owned(),
            format!("--target=http://{addr}"),
            "--api-key=k".to_owned(),
            format!("--rate={rate}"),
            format!("--duration={}ms", duration.as_millis()),
            format!("--connections={connections}"),
            "--timeout=5s".to_owned(),
        ]);
        run(args).await.unwrap().0
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_requests_queued_behind_a_slow_answer_count_their_wait_from_their_due_time() {
        // 100/s on one connection for 300 ms: requests due every 10 ms. The
        // first answer takes 150 ms, so the requests due at 10..140 ms go out
        // only after it, 10..140 ms late. Measured from the send, only the
        // first would be slow.
        let (addr, answered) = server(Duration::from_millis(150), u64::MAX, true).await;
        let tally = pace(addr, 100.0, Duration::from_millis(300), 1).await;
        assert_eq!((tally.due, tally.created, tally.errors), (30, 30, 0));
        assert_eq!(answered.load(Ordering::SeqCst), 30);
        let slow = tally.latency.count_between(50_000, LATENCY_MAX_US);
        assert!(
            slow >= 9,
            "{slow} requests at 50 ms or more; expected the first and those queued behind it"
        );
        assert!(
            tally.send_lag.max() >= 100_000,
            "the queued requests went out late"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_due_request_is_sent_once_across_connections_the_server_closes() {
        // 400/s on 3 connections for 250 ms: 100 requests due; every 7th
        // answer closes its connection, which is replaced for the next.
        let (addr, answered) = server(Duration::ZERO, 7, true).await;
        let tally = pace(addr, 400.0, Duration::from_millis(250), 3).await;
        assert_eq!(
            (tally.due, tally.created, tally.other, tally.errors),
            (100, 100, 0, 0)
        );
        assert_eq!(answered.load(Ordering::SeqCst), 100);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_connection_the_server_closed_while_idle_is_replaced_and_the_request_sent_again() {
        // The server closes after every 3rd answer without saying so, as a
        // keep-alive timeout does: the next request on that connection
        // meets a closed socket before any answer, and goes out again on a
        // new connection.
        let (addr, answered) = server(Duration::ZERO, 3, false).await;
        let tally = pace(addr, 200.0, Duration::from_millis(200), 2).await;
        assert_eq!((tally.due, tally.created, tally.errors), (40, 40, 0));
        assert_eq!(answered.load(Ordering::SeqCst), 40);
    }
}
