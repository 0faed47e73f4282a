-- Task caches forgotten while a build may still mount their volume
-- (`gantry clear-task-cache`, or a cache a build found past its ttl): the
-- `task_caches` row goes at once (the next build of the job starts with an
-- empty cache), and the volume waits here, with whose cache it was and
-- when it was last used, until no build of the job that may mount it is
-- still running; the Collector's `task-caches` rule then marks it
-- `destroying` and deletes this row. Times are unix milliseconds.
CREATE TABLE task_cache_leftovers (
    volume TEXT PRIMARY KEY,
    team TEXT NOT NULL,
    pipeline TEXT NOT NULL,
    job TEXT NOT NULL,
    step TEXT NOT NULL,
    path TEXT NOT NULL,
    worker TEXT NOT NULL,
    last_used_at BIGINT NOT NULL,
    forgotten_at BIGINT NOT NULL
);
