-- Garbage collection (mark and sweep). The epoch is a counter the web node
-- hands a worker before it lists its handles; a row records the epoch at
-- which it became `created`, so a report made at epoch E can judge absent
-- only rows created before E (a create that finished after the listing
-- began cannot look absent). A `created` row absent from a valid report is
-- missing from `missing_since` (unix ms) until it is seen again or removed
-- after a grace period. A worker's last reported incarnation tells the
-- first report of a new incarnation (reconciled at once).
CREATE TABLE gc_epoch (
    id BIGINT PRIMARY KEY,
    value BIGINT NOT NULL
);
INSERT INTO gc_epoch (id, value) VALUES (1, 1);
ALTER TABLE volumes ADD COLUMN created_epoch BIGINT;
ALTER TABLE volumes ADD COLUMN missing_since BIGINT;
ALTER TABLE containers ADD COLUMN created_epoch BIGINT;
ALTER TABLE containers ADD COLUMN missing_since BIGINT;
ALTER TABLE workers ADD COLUMN reported_incarnation TEXT;
