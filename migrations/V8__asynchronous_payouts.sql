-- Asynchronous payouts: a provider may answer "accepted" (`processing`) and
-- report the outcome later, by a signed notification or when asked; a paid
-- payout may come back `returned`.

ALTER TABLE transfers DROP CONSTRAINT transfers_status_check;
ALTER TABLE transfers ADD CONSTRAINT transfers_status_check
    CHECK (status IN ('pending', 'processing', 'succeeded', 'failed', 'returned'));
-- Raised by every status change, so a transfer's events carry the order
-- of its changes (`data.sequence`) and receivers can put them back in order.
ALTER TABLE transfers ADD COLUMN status_sequence integer NOT NULL DEFAULT 0;
ALTER TABLE transfers ADD COLUMN return_reason text;
ALTER TABLE transfers ADD COLUMN returned_at timestamptz;

-- The only status changes there are. Every writer already changes a status
-- with a conditional write from the statuses allowed before it; this makes
-- a writer that forgot one fail instead of moving a transfer backwards or
-- out of a final status. The allowed changes are the trigger's WHEN
-- condition, evaluated without a function call, so the settlements' own
-- changes (one per transfer and change, on the hot path) cost no PL/pgSQL
-- call; the function runs only to refuse.
CREATE FUNCTION payrail_refuse_status_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'transfer % may not go from % to %', OLD.id, OLD.status, NEW.status
        USING ERRCODE = 'check_violation';
END $$;
CREATE TRIGGER transfers_status_change BEFORE UPDATE OF status ON transfers
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status AND NOT (
        (OLD.status = 'pending' AND NEW.status IN ('processing', 'succeeded', 'failed'))
        OR (OLD.status = 'processing' AND NEW.status IN ('succeeded', 'failed'))
        OR (OLD.status = 'succeeded' AND NEW.status = 'returned')))
    EXECUTE FUNCTION payrail_refuse_status_change();

-- Reports that contradict a final status (a decline after a success,
-- anything but a decline after a failure): they change nothing and are
-- kept for operators.
CREATE TABLE transfer_anomalies (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    transfer_id  uuid        NOT NULL,
    -- The status the transfer had when the report came.
    status_then  text        NOT NULL,
    -- What the provider reported: processing, succeeded, declined, returned.
    reported     text        NOT NULL,
    reference    text,
    reason       text,
    -- Where it came from: relay, notification, poll.
    source       text        NOT NULL,
    reported_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX transfer_anomalies_transfer ON transfer_anomalies (transfer_id);

-- Provider notifications already applied, by the provider's notification
-- id, so a repeat changes nothing; the reaper deletes them after their
-- retention.
CREATE TABLE provider_notifications (
    id          text        PRIMARY KEY,
    received_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX provider_notifications_age ON provider_notifications (received_at);

-- Transfers in `processing`, as a leased queue of status lookups (like the
-- outbox): due when the provider should have told us by now, then again
-- with backoff, until the transfer is final. A lookup is never dead-lettered:
-- a payout the provider accepted is asked about until it ends.
CREATE TABLE provider_polls (
    transfer_id      uuid        PRIMARY KEY,
    attempts         integer     NOT NULL DEFAULT 0,
    attempts_base    integer     NOT NULL DEFAULT 0 CHECK (attempts_base <= attempts),
    next_poll_at     timestamptz NOT NULL,
    locked_until     timestamptz,
    last_error       text,
    -- What the last lookup found: processing, not_found, unknown.
    last_status      text,
    dead_at          timestamptz,
    processing_since timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX provider_polls_due ON provider_polls (next_poll_at) WHERE dead_at IS NULL;
-- Stuck transfers: `processing` for longer than --provider-processing-max.
CREATE INDEX provider_polls_since ON provider_polls (processing_since);

ALTER TABLE webhook_events DROP CONSTRAINT webhook_events_type_check;
ALTER TABLE webhook_events ADD CONSTRAINT webhook_events_type_check CHECK (type IN (
    'transfer.processing', 'transfer.succeeded', 'transfer.failed', 'transfer.returned'));
