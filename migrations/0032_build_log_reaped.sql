-- When a build's log was deleted by its job's build_log_retention
-- (gc/log_retention.rs); the build's row, status and times stay.
ALTER TABLE builds ADD COLUMN log_reaped_at BIGINT;
