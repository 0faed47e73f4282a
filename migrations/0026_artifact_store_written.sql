-- When the first web node wrote the shared artifact store's id into the
-- store itself (`.store-id`), unix ms; NULL while it has not yet. A node
-- finding the store without an id writes the recorded one while this is
-- NULL (several nodes starting at once on a fresh database all write the
-- same id), and refuses the store once it is set (the store is not theirs).
ALTER TABLE artifact_store ADD COLUMN written_at BIGINT;
-- Rows recorded before this column were written by their first node.
UPDATE artifact_store SET written_at = 0;
