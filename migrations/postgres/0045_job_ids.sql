-- An integer id per job of a stored pipeline (Concourse's `id` of a job,
-- which fly and Concourse's clients read), kept across sets and renames.
ALTER TABLE pipeline_jobs ADD COLUMN id BIGSERIAL;
CREATE UNIQUE INDEX pipeline_jobs_by_id ON pipeline_jobs (id);
