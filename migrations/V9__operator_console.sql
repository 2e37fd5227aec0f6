-- The operator console (payrail serve --console): operators and their
-- sessions, the audit of their actions, and the history a transfer's
-- timeline shows that no other table keeps (provider attempts and the
-- notifications about it).

-- Operators are a trust domain apart from clients: an operator token never
-- authenticates a client request and an API key never opens the console.
-- Only the token's SHA-256 is stored.
CREATE TABLE operators (
    id          uuid        PRIMARY KEY,
    name        text        NOT NULL,
    token_hash  bytea       NOT NULL UNIQUE CHECK (octet_length(token_hash) = 32),
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);

-- A signed-in browser. The cookie holds a random session secret; only its
-- SHA-256 is stored, so a copy of this table opens no session. The CSRF
-- token is per session and sent back in every state-changing form.
CREATE TABLE operator_sessions (
    secret_hash bytea       PRIMARY KEY CHECK (octet_length(secret_hash) = 32),
    operator_id uuid        NOT NULL REFERENCES operators (id),
    csrf_token  text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);

CREATE INDEX operator_sessions_expiry ON operator_sessions (expires_at);
CREATE INDEX operator_sessions_operator ON operator_sessions (operator_id);

-- Every operator action, written in the action's own transaction: an
-- action that committed is audited and an audited action committed.
CREATE TABLE operator_audit (
    id            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    operator_id   uuid        NOT NULL REFERENCES operators (id),
    operator_name text        NOT NULL,
    action        text        NOT NULL,
    target        text        NOT NULL,
    rows_touched  bigint      NOT NULL CHECK (rows_touched >= 0),
    at            timestamptz NOT NULL DEFAULT now()
);

-- Every call the relay made for a transfer and how it ended, written in
-- the settlement's transaction (one statement per batch). The outbox row
-- keeps only the last error and is deleted once the transfer is final.
CREATE TABLE provider_attempts (
    transfer_id uuid        NOT NULL,
    attempt     integer     NOT NULL,
    outcome     text        NOT NULL,
    detail      text,
    at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (transfer_id, attempt)
);

-- Which transfer a notification was about and what it said, for the
-- timeline (rows received before this migration have neither).
ALTER TABLE provider_notifications ADD COLUMN transfer_id uuid;
ALTER TABLE provider_notifications ADD COLUMN reported text;
CREATE INDEX provider_notifications_transfer ON provider_notifications (transfer_id);

-- The timeline reads a transfer's events and the audit of actions on it.
-- The events' index is one more insert per event on the settlement path,
-- at the index's right edge (transfer ids are time-ordered).
CREATE INDEX webhook_events_transfer ON webhook_events (transfer_id);
CREATE INDEX operator_audit_target ON operator_audit (target);
-- The dead rows' page and its bulk retry read only dead rows.
CREATE INDEX outbox_dead ON outbox (dead_at) WHERE dead_at IS NOT NULL;
