-- The foreign keys on the tables a flush writes cost about 40 % of the
-- flush's Postgres time (EXPLAIN ANALYZE of a 64-row flush: 8.6 ms with
-- them, 5.0-5.3 ms without; one RI trigger, an SPI query with a row lock,
-- per row and key). The references to `clients` also lock the one client
-- row FOR KEY SHARE from every flush in flight, which turns into a
-- MultiXact as soon as two flushes overlap.
--
-- What they guarded is guaranteed by how the rows are written, and checked
-- elsewhere:
--   * idempotency_keys.transfer_id and outbox.transfer_id: the key row, the
--     transfer and the outbox row are written by one statement, from one
--     input row, in one transaction (src/store/keys.rs); nothing deletes a
--     transfer.
--   * transfers.client_id and idempotency_keys.client_id: the client is the
--     authenticated caller, whose API key row references `clients` (that
--     foreign key stays); nothing deletes a client.
-- scripts/chaos checks after every run that no transfer lacks its key row
-- and that every key row names an existing transfer.
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_transfer_id_fkey;
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_client_id_fkey;
ALTER TABLE outbox DROP CONSTRAINT outbox_transfer_id_fkey;
ALTER TABLE transfers DROP CONSTRAINT transfers_client_id_fkey;
