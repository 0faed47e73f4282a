-- Archived pipelines (Concourse's `archived`): paused, never scheduled or
-- checked, their jobs not triggered, until set again; their config and
-- builds are kept. `archived_at`: when (what a retention counts from).
ALTER TABLE pipelines ADD COLUMN archived BIGINT NOT NULL DEFAULT 0;
ALTER TABLE pipelines ADD COLUMN archived_at BIGINT;

-- The job build whose `set_pipeline` step last set the pipeline (its
-- pipeline, job and build; none when set by hand): the pipeline is
-- archived once that job has a newer successful build that did not set it,
-- or the job, or its pipeline, is gone or archived.
ALTER TABLE pipelines ADD COLUMN parent_pipeline_id BIGINT;
ALTER TABLE pipelines ADD COLUMN parent_job TEXT;
ALTER TABLE pipelines ADD COLUMN parent_build_id BIGINT;
CREATE INDEX pipelines_by_parent ON pipelines (parent_pipeline_id) WHERE parent_pipeline_id IS NOT NULL;
