//! Warming a fresh process before it reports ready: its pools open their
//! Postgres and provider connections, and prepare their statements, before
//! the first request rather than during the first burst (why, and what it
//! did to a fresh engine's creation-to-final time: docs/BENCHMARKS.md).
//!
//! Each pool is warmed on the thread that uses it, because a connection is
//! driven by a task on the thread that opened it. A failure is logged and
//! startup goes on: the pools open what is missing when work needs it, as
//! they do after any lost connection.

use std::future::Future;

use actix::ArbiterHandle;

/// Runs `work` (which opens connections and says how many) on `arbiter`'s
/// thread, waits for it, and logs the outcome under `what`.
pub async fn on<E>(
    arbiter: ArbiterHandle,
    what: &'static str,
    work: impl Future<Output = Result<usize, E>> + Send + 'static,
) where
    E: std::fmt::Display + Send + 'static,
{
    let (done, outcome) = tokio::sync::oneshot::channel();
    let spawned = arbiter.spawn(async move {
        // The receiver is gone only if startup was abandoned meanwhile.
        let _ = done.send(work.await);
    });
    if !spawned {
        tracing::warn!(what, "not warmed: its thread has stopped");
        return;
    }
    match outcome.await {
        Ok(Ok(connections)) => tracing::info!(what, connections, "warm"),
        Ok(Err(e)) => {
            tracing::warn!(what, error = %e, "not warmed; its connections open on first use")
        }
        // The work was dropped unfinished: it panicked, or its thread stopped.
        Err(_) => tracing::warn!(what, "not warmed: the warm-up did not finish"),
    }
}
