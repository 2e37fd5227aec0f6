-- Baseline (a) of scripts/bench: what a straightforward service does for one
-- POST /transfers, one transaction per request: the same three rows payrail
-- writes (transfer, idempotency key, outbox), with a response body of the
-- size payrail stores. No NOTIFY: a naive service can poll its outbox, and a
-- NOTIFY in every transaction would serialize the commits on Postgres's
-- notification queue and make the baseline weaker than it needs to be
-- (one_transfer_notify.sql is that variant, measured as an extra row). Run by
-- pgbench with -M prepared -D client=<client uuid> (variables are bind
-- parameters, as payrail's statements are).
\set k random(1, 9000000000000000)
SELECT gen_random_uuid() AS id, now() AS at \gset
BEGIN;
INSERT INTO transfers (id, client_id, idempotency_key, status, amount, currency, source_account,
                       destination_account, description, metadata, created_at, updated_at)
VALUES (:id::uuid, :client::uuid, 'pgbench-' || :k::text, 'pending', 1500, 'USD', 'acc_alice', 'acc_bob', NULL, '{}', :at::timestamptz, :at::timestamptz);
INSERT INTO idempotency_keys (client_id, key, fingerprint, transfer_id, response_status, response_body, created_at, expires_at)
VALUES (:client::uuid, 'pgbench-' || :k::text, sha256(('pgbench-' || :k::text)::bytea), :id::uuid, 201,
        convert_to(repeat('x', 380), 'UTF8'), :at::timestamptz, :at::timestamptz + interval '24 hours')
ON CONFLICT (client_id, key) DO NOTHING;
INSERT INTO outbox (transfer_id, client_id) VALUES (:id::uuid, :client::uuid);
COMMIT;
