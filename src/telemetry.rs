//! Logs (tracing) and metrics (a process-wide Prometheus recorder).

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Seconds; from 0.5 ms (a cached replay) to 10 s (the coalesce timeout).
const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Seconds from a transfer's creation to its final status: from a provider
/// answering at once (tens of ms) to retries and outages (an hour).
const CREATION_TO_FINAL_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];
/// Attempts per flush, up to the largest `--shard-batch-max` worth configuring.
const BATCH_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];

/// Always appended to the filter: the Postgres driver logs every statement's
/// parameters at debug level, and those include API key hashes, account ids
/// and amounts. No `RUST_LOG` may turn that on.
/// The connection's NOTICEs ("relation … already exists, skipping") are
/// Postgres chatting about idempotent DDL, not news.
const QUIET_DRIVER: &str = "tokio_postgres::query=info,tokio_postgres::connection=warn";

/// Logs to stderr, filtered by `RUST_LOG` (default `default_level`). Safe to
/// call twice.
pub fn init_logging(default_level: &str) {
    let wanted = std::env::var("RUST_LOG").unwrap_or_else(|_| default_level.into());
    let filter = tracing_subscriber::EnvFilter::try_new(format!("{wanted},{QUIET_DRIVER}"))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("info,{QUIET_DRIVER}")));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .try_init();
}

/// How often histogram samples are folded into their buckets, scraped or
/// not (metrics-exporter-prometheus's own default).
const METRICS_UPKEEP_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// The process's metrics recorder, installed on first use. One per process,
/// because `metrics` has one global recorder; tests that start several apps
/// in one process share it.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full("payrail_transfer_creation_to_final_seconds".into()),
                    CREATION_TO_FINAL_BUCKETS,
                )
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
                })
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
            describe_metrics();
            // Histograms keep every sample until an upkeep folds them into
            // their buckets. Left to `/metrics` alone, a process nobody
            // scrapes grows by every request's samples (scripts/soak: about
            // 5 MiB a minute at 420 transfers/s), so a thread does it on a
            // timer too.
            let upkeep = handle.clone();
            let spawned = std::thread::Builder::new()
                .name("metrics-upkeep".into())
                .spawn(move || loop {
                    std::thread::sleep(METRICS_UPKEEP_INTERVAL);
                    upkeep.run_upkeep();
                });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "no metrics upkeep thread: histograms grow until /metrics is scraped");
            }
            handle
        })
        .clone()
}

/// What a metric is.
#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Every metric: its kind, name, unit and `# HELP` line. A test checks that
/// each metric `/metrics` shows is here, so a new metric cannot go
/// undescribed.
const METRICS: &[(Kind, &str, Option<metrics::Unit>, &str)] = {
    use metrics::Unit;
    use Kind::*;
    &[
    (Counter, "payrail_http_requests_total", None, "HTTP requests answered, by route pattern, method and status (unknown ones are 'other')"),
    (Counter, "payrail_auth_lookups_refused_total", None, "Requests with an API key no cache knew, answered 503 without a query: past --auth-lookups-per-second-max"),
    (Histogram, "payrail_http_request_duration_seconds", Some(Unit::Seconds), "Time to answer an HTTP request, by route pattern and method"),
    (Gauge, "payrail_shard_queue_depth", None, "Attempts a key-shard holds: queued for a flush, in one, or waiting on their key's write"),
    (Gauge, "payrail_replay_cache_entries", None, "Committed answers in a shard's replay cache"),
    (Counter, "payrail_replay_cache_hits_total", None, "Attempts answered from a replay cache, without Postgres"),
    (Counter, "payrail_replay_cache_misses_total", None, "Attempts of keys not in the replay cache, queued for a flush"),
    (Histogram, "payrail_shard_batch_size", None, "Attempts written per flush (one transaction)"),
    (Histogram, "payrail_shard_flush_seconds", Some(Unit::Seconds), "Duration of a flush, from its start to its commit"),
    (Counter, "payrail_shard_flush_splits_total", None, "Flushes Postgres refused for particular rows, retried in halves"),
    (Counter, "payrail_shard_flush_lock_retries_total", None, "Flushes retried whole after waiting past the lock timeout for a lock that is not a row's"),
    (Counter, "payrail_shard_flush_failures_total", None, "Flushes that failed, answering their attempts 409 or 503"),
    (Gauge, "payrail_outbox_backlog", None, "Outbox rows not yet settled and not dead-lettered (all processes) (counted up to 100000: a figure there means at least)"),
    (Gauge, "payrail_outbox_dead", None, "Dead-lettered outbox rows, waiting for `payrail outbox retry` (counted up to 100000: a figure there means at least)"),
    (Gauge, "payrail_outbox_oldest_due_age_seconds", Some(Unit::Seconds), "Age of the oldest outbox row that is due now"),
    (Gauge, "payrail_outbox_waiting_rows", None, "Outbox rows due and held by no relay, counted up to --outbox-backlog-max + 1 per client, summed over clients (measured by this process's relay)"),
    (Gauge, "payrail_outbox_waiting_age_seconds", Some(Unit::Seconds), "How long the oldest outbox row due and held by no relay has waited, over every client"),
    (Gauge, "payrail_settlement_lagging", None, "Clients whose new transfers are refused because their settlement lags (--outbox-backlog-max, --outbox-lag-max); 0 when none is"),
    (Counter, "payrail_transfers_refused_lagging_total", None, "Attempts of POST /transfers answered 503 settlement-lagging"),
    (Gauge, "payrail_queue_held_rows", None, "Rows a queue's worker in this process holds: waiting for a slot, being worked on, or waiting for settlement, by queue (outbox, webhooks)"),
    (Counter, "payrail_queue_handed_over_total", None, "Rows handed to a queue's worker in memory by the code that claimed them (a flush), by queue"),
    (Counter, "payrail_queue_claims_expired_total", None, "Claimed rows given back to the queue because they were too old to start safely (nothing was sent for them), by queue"),
    (Histogram, "payrail_queue_claim_size", None, "Rows per claim, by queue"),
    (Counter, "payrail_relay_wakeups_total", None, "NOTIFYs sent to wake the relays after flushes wrote rows none of them claimed"),
    (Histogram, "payrail_queue_settle_batch_size", None, "Outcomes settled per transaction, by queue"),
    (Histogram, "payrail_queue_settle_seconds", Some(Unit::Seconds), "Duration of a settlement batch, by queue"),
    (Counter, "payrail_queue_settle_failures_total", None, "Outcomes Postgres refused to settle even alone (rescheduled, counted against the retry budget), by queue"),
    (Gauge, "payrail_reaper_expired_keys", None, "Expired idempotency keys not yet deleted (counted up to 1 000 000)"),
    (Gauge, "payrail_reaper_expired_keys_oldest_age_seconds", Some(Unit::Seconds), "How long ago the oldest idempotency key not yet deleted expired"),
    (Counter, "payrail_provider_calls_total", None, "Provider calls, by outcome (succeeded, declined, transient, permanent, misconfigured)"),
    (Histogram, "payrail_provider_call_seconds", Some(Unit::Seconds), "Duration of a provider call"),
    (Histogram, "payrail_transfer_creation_to_final_seconds", Some(Unit::Seconds), "Time from a transfer's creation to its final status (succeeded or failed), as recorded by the settlement that made it final"),
    (Counter, "payrail_provider_lookups_total", None, "GET /payouts/{id} lookups made before posting an ambiguous payout again, by outcome (found, not_found, unknown)"),
    (Counter, "payrail_reaped_keys_total", None, "Expired idempotency keys deleted by the reaper"),
    (Counter, "payrail_reaped_events_total", None, "Webhook events past --event-retention deleted by the reaper, with their delivery records"),
    (Counter, "payrail_reaped_provider_notifications_total", None, "Provider notification ids past --provider-notification-retention forgotten by the reaper"),
    (Counter, "payrail_provider_notifications_total", None, "Signed provider notifications received, by outcome (applied, repeat, late, unknown_transfer, not_recorded, unauthenticated, malformed)"),
    (Histogram, "payrail_provider_notification_batch_size", Some(Unit::Count), "Provider notifications applied in one transaction"),
    (Counter, "payrail_provider_polls_total", None, "Status lookups of processing transfers, by what the provider answered (outcome, processing, not_found, unknown)"),
    (Counter, "payrail_return_lookups_total", None, "Lookups of succeeded transfers during their return window, by what they found (succeeded: still; changed: a return or a contradiction, applied by the status machine; unknown: no usable answer)"),
    (Gauge, "payrail_return_watches", None, "Succeeded transfers still to be looked up for a return (counted up to 100000: a figure there means at least)"),
    (Gauge, "payrail_return_watches_dead", None, "Return watches parked after too many lookups without a usable answer (counted up to 100000: a figure there means at least)"),
    (Gauge, "payrail_return_watches_oldest_due_age_seconds", Some(Unit::Seconds), "How long the oldest due return lookup has waited"),
    (Counter, "payrail_transfer_anomalies_total", None, "Provider reports that contradict a transfer's final status, kept for operators, by source (relay, notification, poll)"),
    (Gauge, "payrail_transfers_processing", None, "Transfers the provider accepted and has not decided yet (counted up to 100000: a figure there means at least)"),
    (Gauge, "payrail_transfers_stuck", None, "Of those, the ones processing for longer than --provider-processing-max (counted up to 100000: a figure there means at least)"),
    (Gauge, "payrail_transfers_processing_oldest_age_seconds", Some(Unit::Seconds), "How long the oldest processing transfer has waited for its outcome"),
    (Gauge, "payrail_webhook_backlog", None, "Webhook deliveries neither delivered nor dead (counted up to 100000: a figure there means at least)"),
    (Gauge, "payrail_webhook_dead", None, "Webhook deliveries that ran out of attempts or lost their endpoint (counted up to 100000: a figure there means at least)"),
    (Gauge, "payrail_webhook_oldest_due_age_seconds", Some(Unit::Seconds), "How long the oldest due webhook delivery has waited"),
    (Counter, "payrail_webhook_deliveries_total", None, "Webhook delivery attempts, by outcome (delivered, retry, dead, gone)"),
    (Histogram, "payrail_webhook_delivery_seconds", Some(Unit::Seconds), "Duration of one webhook delivery attempt"),
    ]
};

/// Describes every metric of [`METRICS`] to the recorder.
fn describe_metrics() {
    for &(kind, name, unit, help) in METRICS {
        match (kind, unit) {
            (Kind::Counter, Some(u)) => metrics::describe_counter!(name, u, help),
            (Kind::Counter, None) => metrics::describe_counter!(name, help),
            (Kind::Gauge, Some(u)) => metrics::describe_gauge!(name, u, help),
            (Kind::Gauge, None) => metrics::describe_gauge!(name, help),
            (Kind::Histogram, Some(u)) => metrics::describe_histogram!(name, u, help),
            (Kind::Histogram, None) => metrics::describe_histogram!(name, help),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capped_figure_names_its_bound() {
        let capped: Vec<&str> = METRICS
            .iter()
            .map(|(_, _, _, help)| *help)
            .filter(|help| help.contains("a figure there means at least"))
            .collect();
        assert_eq!(capped.len(), 8, "{capped:?}");
        let bound = format!("counted up to {}:", crate::store::FIGURE_ROWS_MAX);
        assert!(
            capped.iter().all(|help| help.contains(&bound)),
            "{capped:?}"
        );
    }
}
