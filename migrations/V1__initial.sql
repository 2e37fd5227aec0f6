-- Tenants and their API keys. Only the SHA-256 of a key is ever stored.
CREATE TABLE clients (
    id          uuid        PRIMARY KEY,
    name        text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
    key_hash    bytea       PRIMARY KEY CHECK (octet_length(key_hash) = 32),
    client_id   uuid        NOT NULL REFERENCES clients (id),
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);

-- Transfers are kept forever; the key they were created under may expire and
-- be reused, so idempotency_key is not unique here.
CREATE TABLE transfers (
    id                  uuid        PRIMARY KEY,
    client_id           uuid        NOT NULL REFERENCES clients (id),
    idempotency_key     text        NOT NULL,
    status              text        NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
    amount              bigint      NOT NULL CHECK (amount BETWEEN 1 AND 999999999999),
    currency            text        NOT NULL,
    source_account      text        NOT NULL,
    destination_account text        NOT NULL,
    description         text,
    metadata            jsonb       NOT NULL DEFAULT '{}',
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    provider_reference  text,
    failure_reason      text
);

-- Keyset pagination: a client's transfers, newest first.
CREATE INDEX transfers_client_newest ON transfers (client_id, created_at DESC, id DESC);

-- The durable idempotency record. Its primary key is the last line of
-- defence: two processes racing one key create one row.
CREATE TABLE idempotency_keys (
    client_id       uuid        NOT NULL REFERENCES clients (id),
    key             text        NOT NULL,
    fingerprint     bytea       NOT NULL CHECK (octet_length(fingerprint) = 32),
    transfer_id     uuid        NOT NULL REFERENCES transfers (id),
    response_status integer     NOT NULL,
    response_body   bytea       NOT NULL,
    created_at      timestamptz NOT NULL,
    expires_at      timestamptz NOT NULL,
    PRIMARY KEY (client_id, key)
);

-- The reaper deletes by age.
CREATE INDEX idempotency_keys_expiry ON idempotency_keys (expires_at);

-- One row per accepted transfer, written in the same transaction. The relay
-- claims due rows with a lease; completed rows are deleted, dead ones stay.
CREATE TABLE outbox (
    transfer_id  uuid        PRIMARY KEY REFERENCES transfers (id),
    attempts     integer     NOT NULL DEFAULT 0,
    available_at timestamptz NOT NULL DEFAULT now(),
    locked_until timestamptz,
    last_error   text,
    dead_at      timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- Due rows in the order the relay takes them; dead rows are out of the way.
CREATE INDEX outbox_due ON outbox (available_at) WHERE dead_at IS NULL;
