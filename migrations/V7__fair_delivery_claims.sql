-- Deliveries are claimed fairly: a claim counts what each endpoint and each
-- client has in flight (a lease stamped on the row) and skips those that
-- hold their share, so one client's hanging receivers cost that client's
-- deliveries only. The client is copied onto the delivery when it is
-- written, so counting needs no join. Nullable: an engine of the release
-- before, still running during a rolling deploy, writes deliveries without
-- it (those share one client share until they are delivered).
ALTER TABLE webhook_deliveries ADD COLUMN client_id uuid;
UPDATE webhook_deliveries d SET client_id = e.client_id FROM webhook_events e WHERE e.id = d.event_id;

-- Every settlement clears `locked_until`, so these hold only the deliveries
-- in flight and those whose holder vanished: they stay small however large
-- the backlog grows.
CREATE INDEX webhook_deliveries_held_by_endpoint ON webhook_deliveries (endpoint_id) WHERE locked_until IS NOT NULL;
CREATE INDEX webhook_deliveries_held_by_client ON webhook_deliveries (client_id) WHERE locked_until IS NOT NULL;
