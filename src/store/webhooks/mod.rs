//! Webhook endpoints, events and deliveries, each with a store handle of
//! its own. Events are written by the status machine (`store::status`) in
//! the transaction of the change they announce; deliveries are a leased queue ([`DELIVERIES`],
//! `store::queue`) like the outbox, claimed fairly by endpoint and client.

mod deliveries;
mod endpoints;
mod events;

pub use deliveries::{
    bounded_error, ClaimedDelivery, DeliverySettlement, DeliveryStore, WebhookStats, DELIVERIES,
    WEBHOOK_CHANNEL,
};
pub use endpoints::{Endpoint, EndpointRefused, EndpointStore};
pub(in crate::store) use events::{deliveries_of, requeue_deliveries, revive_endpoint};
pub use events::{DeliveryRecord, DeliveryState, EventFilter, EventPage, EventRecord, EventStore};
