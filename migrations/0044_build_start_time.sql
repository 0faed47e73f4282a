-- When a build started running (unix ms; none while it is pending):
-- Concourse's `start_time`, which fly's `builds` and `watch` show.
ALTER TABLE builds ADD COLUMN started_at BIGINT;
