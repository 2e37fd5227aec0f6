-- Extra row of scripts/bench: baseline (a) plus a pg_notify in every
-- transaction, as a naive service that wakes its relay by NOTIFY would do.
-- Postgres serializes committing transactions that notified on its
-- notification queue, which caps this design well below (a).
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
SELECT pg_notify('payrail_outbox', '');
COMMIT;
