//! payrail: an actor-based payment/transfer engine. See `docs/ARCHITECTURE.md`.

pub mod api;
pub mod cli;
pub mod config;
pub mod console;
pub mod domain;
pub mod outcome;
pub mod pgcluster;
pub mod provider;
pub mod queue;
pub mod reaper;
pub mod relay;
pub mod shard;
pub mod sim;
pub mod started;
pub mod startup;
pub mod store;
pub mod sync;
pub mod telemetry;
pub mod warm;
pub mod webhook;
