//! payrail: an actor-based payment/transfer engine. See `docs/ARCHITECTURE.md`.

pub mod provider;
pub mod sim;
