-- Artifacts live on workers: a job build's task outputs stay in volumes on
-- the worker that made them, and a transfer to another worker leaves a
-- copy there; each such volume names its artifact in `volumes.artifact_id`
-- (as image volumes already do). `in_store` says whether the web node's
-- store holds the artifact too (uploads, one-off build outputs, resource
-- caches: 1) or only volumes on workers do (0).
ALTER TABLE artifacts ADD COLUMN in_store BIGINT NOT NULL DEFAULT 1;
CREATE INDEX volumes_by_artifact_id ON volumes (artifact_id);
