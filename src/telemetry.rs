//! Logs (tracing) and metrics (a process-wide Prometheus recorder).

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Seconds; from 0.5 ms (a cached replay) to 10 s (the coalesce timeout).
const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Attempts per flush, up to the largest `--max-batch` worth configuring.
const BATCH_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];

/// Always appended to the filter: the Postgres driver logs every statement's
/// parameters at debug level, and those include API key hashes, account ids
/// and amounts. No `RUST_LOG` may turn that on.
const QUIET_DRIVER: &str = "tokio_postgres::query=info";

/// Logs to stderr, filtered by `RUST_LOG` (default `info`). Safe to call twice.
pub fn init_logging() {
    let wanted = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into());
    let filter = tracing_subscriber::EnvFilter::try_new(format!("{wanted},{QUIET_DRIVER}"))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("info,{QUIET_DRIVER}")));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .try_init();
}

/// The process's metrics recorder, installed on first use. One per process,
/// because `metrics` has one global recorder; tests that start several apps
/// in one process share it.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Suffix("_size".into()), BATCH_BUCKETS)
                });
            let recorder = match builder {
                Ok(b) => b.build_recorder(),
                Err(_) => PrometheusBuilder::new().build_recorder(),
            };
            let handle = recorder.handle();
            // Fails only if another recorder is installed; then ours stays local.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}
