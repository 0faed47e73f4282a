-- An integer id per job of a stored pipeline (Concourse's `id` of a job,
-- which fly and Concourse's clients read), kept across sets and renames.
-- SQLite cannot add a column that counts by itself: each new row takes
-- one more than the highest id given.
ALTER TABLE pipeline_jobs ADD COLUMN id BIGINT;
UPDATE pipeline_jobs SET id = rowid;
CREATE UNIQUE INDEX pipeline_jobs_by_id ON pipeline_jobs (id);
CREATE TRIGGER pipeline_jobs_take_an_id AFTER INSERT ON pipeline_jobs
WHEN NEW.id IS NULL
BEGIN
    UPDATE pipeline_jobs SET id = (SELECT COALESCE(MAX(id), 0) + 1 FROM pipeline_jobs)
    WHERE rowid = NEW.rowid;
END;
