-- Images are deduplicated by the digest of their tar: uploading the same
-- image again reuses the artifact, so a worker that unpacked it keeps using it.
ALTER TABLE artifacts ADD COLUMN digest TEXT;
ALTER TABLE artifacts ADD COLUMN kind TEXT NOT NULL DEFAULT 'files';
CREATE INDEX artifacts_by_digest ON artifacts (team, digest);
