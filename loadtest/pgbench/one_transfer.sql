-- The baseline of scripts/bench: what a straightforward service does for one
-- POST /transfers, one transaction per request: the same three rows payrail
-- writes (transfer, idempotency key, outbox) and the same notification, with
-- a response body of the size payrail stores. Run by pgbench with
-- -D client=<client uuid>.
\set k random(1, 9000000000000000)
SELECT gen_random_uuid() AS id, now() AS at \gset
BEGIN;
INSERT INTO transfers (id, client_id, idempotency_key, status, amount, currency, source_account,
                       destination_account, description, metadata, created_at, updated_at)
VALUES (:'id', :'client', 'pgbench-' || :k, 'pending', 1500, 'USD', 'acc_alice', 'acc_bob', NULL, '{}', :'at', :'at');
INSERT INTO idempotency_keys (client_id, key, fingerprint, transfer_id, response_status, response_body, created_at, expires_at)
VALUES (:'client', 'pgbench-' || :k, sha256(('pgbench-' || :k)::bytea), :'id', 201,
        convert_to(repeat('x', 380), 'UTF8'), :'at', :'at'::timestamptz + interval '24 hours')
ON CONFLICT (client_id, key) DO NOTHING;
INSERT INTO outbox (transfer_id) VALUES (:'id');
SELECT pg_notify('payrail_outbox', '');
COMMIT;
