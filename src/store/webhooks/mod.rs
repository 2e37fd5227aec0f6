//! Webhook endpoints, events and deliveries, each with a store handle of
//! its own. Events are written inside the relay's settlement transaction
//! ([`insert_events`]); deliveries are a leased queue ([`DELIVERIES`],
//! `store::queue`) like the outbox, claimed fairly by endpoint and client.

mod deliveries;
mod endpoints;
mod events;

pub use deliveries::{
    bounded_error, ClaimedDelivery, DeliverySettlement, DeliveryStore, WebhookStats, DELIVERIES,
    WEBHOOK_CHANNEL,
};
pub use endpoints::{Endpoint, EndpointRefused, EndpointStore};
pub(in crate::store) use events::{
    deliveries_of, insert_events, requeue_deliveries, INSERT_EVENTS,
};
pub use events::{DeliveryRecord, DeliveryState, EventFilter, EventPage, EventRecord, EventStore};
