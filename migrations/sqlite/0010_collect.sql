-- The Collector's ownership rules (garbage collection, web side).
-- A job build records its pipeline and job, so the rules can tell the
-- latest build of a job (a failed or errored latest build keeps its
-- containers and volumes until a newer build of the job has ended).
-- Task caches record the ttl of the step's cache (unix ms, none: kept);
-- resource caches and artifacts record when a build last used them (unix
-- ms; none: never since they were made).
ALTER TABLE builds ADD COLUMN pipeline TEXT;
ALTER TABLE builds ADD COLUMN job TEXT;
CREATE INDEX builds_by_job ON builds (team, pipeline, job, id);
ALTER TABLE task_caches ADD COLUMN ttl_ms BIGINT;
ALTER TABLE resource_caches ADD COLUMN last_used_at BIGINT;
ALTER TABLE artifacts ADD COLUMN last_used_at BIGINT;
CREATE INDEX containers_by_build ON containers (build_id);
CREATE INDEX volumes_by_build ON volumes (build_id);
-- Job builds made before this migration: their stored plan names the job.
UPDATE builds
SET job = json_extract(plan, '$.job'),
    pipeline = COALESCE(json_extract(plan, '$.pipeline_name'), 'main')
WHERE json_valid(plan) AND json_type(plan, '$.job') = 'text';
