-- Whether a stored event is its build's last (a status that ends it), so a
-- follower knows it without parsing the event back. The final event of a
-- build that ended before this migration is its last one.
ALTER TABLE build_events ADD COLUMN final INTEGER NOT NULL DEFAULT 0;
UPDATE build_events SET final = 1
WHERE seq = (SELECT MAX(e.seq) FROM build_events e WHERE e.build_id = build_events.build_id)
  AND build_id IN (SELECT id FROM builds WHERE status IN ('succeeded', 'failed', 'errored', 'aborted'));
