-- Isolation between clients on the relay's side: the relay claims fairly
-- across clients and the settlement-lag gate refuses a client only for its
-- own backlog. Both read an outbox row's client, so the row carries it
-- (written by the flush from the same input as the transfer; a join to
-- transfers per row would be a read per candidate in every claim).
--
-- Nullable: an engine of the release before, still running during a
-- rolling deploy, writes outbox rows without it (as V7 did for
-- deliveries). Every relay gives such rows their client within a lag poll
-- (`OutboxStore::attribute`, on the small index below); until then the
-- engines of the release before claim them as they always did.
ALTER TABLE outbox ADD COLUMN client_id uuid;
UPDATE outbox o SET client_id = t.client_id FROM transfers t WHERE t.id = o.transfer_id;
CREATE INDEX outbox_unattributed ON outbox (transfer_id) WHERE client_id IS NULL;

-- One client's open rows in the order it is served: the fair claim's pick
-- walks it per client (one descent to find the next client with open rows,
-- then at most what that client may still be handed), and the lag gate
-- measures each client's waiting rows on it. A client with millions of due
-- rows costs a claim no more than one with a handful.
CREATE INDEX outbox_client_due ON outbox (client_id, available_at) WHERE dead_at IS NULL;

-- The fair delivery claim picks per endpoint the same way: one descent to
-- find the next endpoint with open deliveries, then at most what is left
-- of its share. The pick before walked the due index across every
-- endpoint, skipping the rows of those holding their share: a client with
-- millions of due deliveries to a hanging receiver made every claim read
-- them all. This index serves everything the one on `endpoint_id` alone
-- served, and costs a reschedule nothing more (it changes
-- `next_attempt_at`, which the due index holds already).
CREATE INDEX webhook_deliveries_endpoint_due ON webhook_deliveries (endpoint_id, next_attempt_at)
    WHERE delivered_at IS NULL AND dead_at IS NULL;
DROP INDEX webhook_deliveries_endpoint;

-- Neither queue keeps an index on its due column alone any more: every
-- read of due rows (the claims' picks, the lag measure, the oldest due
-- row's age in /metrics) goes client by client or endpoint by endpoint.
-- Kept, the planner took it for a group's rows, filtering a whole backlog
-- by group to find another group's few rows (tests/pick_cost.rs); dropped,
-- each row written costs one index fewer than with both.
DROP INDEX outbox_due;
DROP INDEX webhook_deliveries_due;

-- Returns are never lost: a transfer that succeeded is looked up again a
-- few times while its provider may still return it (--return-window,
-- --return-lookups), so a `returned` whose notifications were all lost
-- (an outage longer than the provider's retries) is still found. A leased
-- queue like the others; a row per watched transfer, written by the status
-- machine when the transfer becomes `succeeded`, deleted once its lookups
-- are done or the transfer is `returned`.
CREATE TABLE return_watches (
    transfer_id    uuid        PRIMARY KEY,
    attempts       integer     NOT NULL DEFAULT 0,
    attempts_base  integer     NOT NULL DEFAULT 0 CHECK (attempts_base <= attempts),
    -- Lookups still to make after the one due next, this one included.
    lookups_left   integer     NOT NULL CHECK (lookups_left >= 0),
    next_lookup_at timestamptz NOT NULL,
    locked_until   timestamptz,
    last_error     text,
    dead_at        timestamptz,
    succeeded_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX return_watches_due ON return_watches (next_lookup_at) WHERE dead_at IS NULL;
