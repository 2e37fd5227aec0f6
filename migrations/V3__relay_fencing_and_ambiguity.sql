-- The relay's fencing token and its retry budget are two different things.
-- `attempts` counts every claim and is never lowered, so a holder stalled
-- since an old claim can never match a new one. `attempts_base` is where the
-- current retry budget started: `payrail outbox retry` raises it to
-- `attempts`, and a row is dead once `attempts - attempts_base` reaches the
-- attempt limit.
ALTER TABLE outbox ADD COLUMN attempts_base integer NOT NULL DEFAULT 0;

-- Once one call's outcome is unknown (a timeout, a dropped connection, a 5xx),
-- the payout may have executed: a later permanent 4xx no longer proves that
-- it did not, and the relay asks the provider before calling it failed.
ALTER TABLE outbox ADD COLUMN ambiguous boolean NOT NULL DEFAULT false;

ALTER TABLE outbox ADD CONSTRAINT outbox_budget_within_attempts CHECK (attempts_base <= attempts);
