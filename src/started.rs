//! The parts of a running engine, as the engine starts and stops them: each
//! runs on a thread of its own (an actix `Arbiter`), every one is stopped
//! with the engine, and a part that holds work (a queue's worker) is
//! drained first, in [`DrainOrder`], within `--shutdown-grace`.

use std::time::Duration;

use actix::{Arbiter, Recipient};

use crate::queue::worker::Drain;

/// When a part is drained on shutdown, relative to the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DrainOrder {
    /// Together, first: the relay and the poller, whose settlements write
    /// the events.
    First,
    /// Once every `First` part is drained: webhook deliveries, which send
    /// those events.
    After,
}

/// One part of a running engine.
pub struct Started {
    /// What it is, for the logs.
    name: &'static str,
    /// Its thread; stopped with the engine.
    arbiter: Arbiter,
    /// Drained before the threads stop, when it holds work.
    drain: Option<(DrainOrder, Recipient<Drain>)>,
}

impl Started {
    /// A part with nothing to drain: stopping its thread is enough.
    pub fn thread(name: &'static str, arbiter: Arbiter) -> Self {
        Self {
            name,
            arbiter,
            drain: None,
        }
    }

    /// A part that holds work, drained in `order` before the threads stop.
    pub fn draining(
        name: &'static str,
        arbiter: Arbiter,
        order: DrainOrder,
        worker: Recipient<Drain>,
    ) -> Self {
        Self {
            name,
            arbiter,
            drain: Some((order, worker)),
        }
    }
}

/// Every part of an engine: drained, then stopped (also when dropped).
#[derive(Default)]
pub struct Parts(Vec<Started>);

impl Parts {
    /// Adds a part.
    pub fn push(&mut self, part: Started) {
        self.0.push(part);
    }

    /// Drains the parts that hold work, in [`DrainOrder`] (the parts of one
    /// order together), within `grace`; answers false when the grace ran
    /// out first. Rows still held then are taken over after their leases.
    pub async fn drain(&self, grace: Duration) -> bool {
        let drains = async {
            for order in [DrainOrder::First, DrainOrder::After] {
                let now: Vec<_> = self
                    .0
                    .iter()
                    .filter_map(|p| match &p.drain {
                        Some((o, worker)) if *o == order => Some(async move {
                            // An error is a worker already stopped: nothing held.
                            let _ = worker.send(Drain).await;
                            tracing::info!(
                                part = p.name,
                                "drained: every row in flight was recorded"
                            );
                        }),
                        _ => None,
                    })
                    .collect();
                futures::future::join_all(now).await;
            }
        };
        tokio::time::timeout(grace, drains).await.is_ok()
    }

    /// Adds parts.
    pub fn extend(&mut self, parts: impl IntoIterator<Item = Started>) {
        self.0.extend(parts);
    }

    /// How many parts run.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when none runs.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl Drop for Parts {
    fn drop(&mut self) {
        for part in &self.0 {
            part.arbiter.stop();
        }
    }
}
