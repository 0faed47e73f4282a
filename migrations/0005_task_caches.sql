-- Task caches of job builds: one volume per (team, pipeline, job, step,
-- cache path, worker), kept between builds and mounted in the next build of
-- the job that runs the step on that worker. The volume's own row (in
-- `volumes`, role `task-cache:PATH`) has no build, so no build's cleanup
-- destroys it. Times are unix milliseconds.
CREATE TABLE task_caches (
    team TEXT NOT NULL,
    pipeline TEXT NOT NULL,
    job TEXT NOT NULL,
    step TEXT NOT NULL,
    path TEXT NOT NULL,
    worker TEXT NOT NULL,
    volume TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    last_used_at BIGINT NOT NULL,
    UNIQUE (team, pipeline, job, step, path, worker)
);
CREATE INDEX task_caches_by_volume ON task_caches (volume);
