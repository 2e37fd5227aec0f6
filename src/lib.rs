//! payrail: an actor-based payment/transfer engine. See `docs/ARCHITECTURE.md`.

pub mod config;
pub mod domain;
pub mod provider;
pub mod sim;
pub mod store;
