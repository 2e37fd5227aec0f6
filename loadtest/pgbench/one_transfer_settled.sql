-- Baseline (a') of scripts/bench: the naive design end to end. Transaction
-- one is baseline (a): the transfer, its key and its outbox row. Transaction
-- two is what its relay commits once the provider answered: the transfer's
-- final status and the outbox row's deletion, durable before the next call.
-- (The provider call itself is not made: this baseline pays only for
-- Postgres, which flatters it.)
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
BEGIN;
UPDATE transfers SET status = 'succeeded', provider_reference = 'ref-' || :k::text, updated_at = now()
WHERE id = :id::uuid AND status = 'pending';
DELETE FROM outbox WHERE transfer_id = :id::uuid;
COMMIT;
