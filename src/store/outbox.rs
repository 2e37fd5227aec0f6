//! Outbox rows: claimed by the relay with a lease, completed with the transfer status.
