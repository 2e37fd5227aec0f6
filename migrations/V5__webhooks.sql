-- Webhooks: where a client wants to hear about final statuses, what was said
-- (one event per transfer that became final), and one delivery per event and
-- endpoint, claimed with a lease like an outbox row.

CREATE TABLE webhook_endpoints (
    id                    uuid        PRIMARY KEY,
    client_id             uuid        NOT NULL REFERENCES clients (id),
    url                   text        NOT NULL,
    description           text,
    -- The signing secret must be read back to sign, so it is stored as it is
    -- (unlike API keys, which are only ever compared).
    secret                text        NOT NULL,
    -- After a rotation, deliveries are signed with both secrets until then.
    previous_secret       text,
    previous_secret_until timestamptz,
    created_at            timestamptz NOT NULL DEFAULT now(),
    -- A receiver answered 410 Gone.
    disabled_at           timestamptz,
    deleted_at            timestamptz
);

-- A client's live endpoints: the per-client limit and the event fan-out.
CREATE INDEX webhook_endpoints_client ON webhook_endpoints (client_id) WHERE deleted_at IS NULL;

-- Written in the relay's settlement transaction. Event ids are UUID v7, so
-- (client_id, id) orders a client's events by time for keyset pages.
CREATE TABLE webhook_events (
    client_id   uuid        NOT NULL,
    id          uuid        NOT NULL,
    transfer_id uuid        NOT NULL,
    type        text        NOT NULL CHECK (type IN ('transfer.succeeded', 'transfer.failed')),
    -- The exact bytes every attempt sends.
    body        text        NOT NULL,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (client_id, id)
);
CREATE UNIQUE INDEX webhook_events_id ON webhook_events (id);

-- `attempts` counts every claim and is the fencing token (never lowered);
-- `attempts_base` is where the current retry schedule started (redeliver
-- raises it), as for the outbox.
CREATE TABLE webhook_deliveries (
    event_id        uuid        NOT NULL,
    endpoint_id     uuid        NOT NULL,
    attempts        integer     NOT NULL DEFAULT 0,
    attempts_base   integer     NOT NULL DEFAULT 0 CHECK (attempts_base <= attempts),
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    locked_until    timestamptz,
    last_status     integer,
    last_error      text,
    delivered_at    timestamptz,
    dead_at         timestamptz,
    PRIMARY KEY (event_id, endpoint_id)
);

-- Due deliveries in the order the delivery worker takes them.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
    WHERE delivered_at IS NULL AND dead_at IS NULL;
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id)
    WHERE delivered_at IS NULL AND dead_at IS NULL;
-- Dead deliveries, for `/metrics` and `GET /events?delivery=dead`.
CREATE INDEX webhook_deliveries_dead ON webhook_deliveries (event_id) WHERE dead_at IS NOT NULL;
