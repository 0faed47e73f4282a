-- Volumes that hold an artifact's contents on a worker (images, unpacked once
-- per worker and reused) name the artifact.
ALTER TABLE volumes ADD COLUMN artifact_id TEXT;
CREATE INDEX volumes_by_artifact ON volumes (worker, artifact_id);
