-- Who made a build by hand (`user:NAME`, `token:ID`, `admin`, ...: the
-- audit log's names) and who aborted it; NULL: made by the scheduler or
-- a check, or never aborted by hand.
ALTER TABLE builds ADD COLUMN created_by TEXT;
ALTER TABLE builds ADD COLUMN aborted_by TEXT;
