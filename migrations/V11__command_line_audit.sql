-- Repairs made from the command line (`payrail outbox retry`) are audited
-- like the console's, in the repair's own transaction. They have no
-- operator account: the audit keeps who ran them as the command saw it
-- (the operating system's user), and no operator id.
ALTER TABLE operator_audit ALTER COLUMN operator_id DROP NOT NULL;
ALTER TABLE operator_audit ADD CONSTRAINT operator_audit_names_its_actor
    CHECK (operator_id IS NOT NULL OR operator_name LIKE 'cli:%');
