-- Public pipelines (Concourse's `expose-pipeline`): anyone, signed in or
-- not, reads an exposed pipeline, its jobs' statuses and its builds; the
-- logs of the jobs marked `public: true`, and the version metadata of the
-- resources marked so. `public` on a job or a resource is the config's,
-- written each time the pipeline is set.
ALTER TABLE pipelines ADD COLUMN public BIGINT NOT NULL DEFAULT 0;
ALTER TABLE pipeline_jobs ADD COLUMN public BIGINT NOT NULL DEFAULT 0;
ALTER TABLE pipeline_resources ADD COLUMN public BIGINT NOT NULL DEFAULT 0;
