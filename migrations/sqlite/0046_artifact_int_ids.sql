-- An integer id per artifact (Concourse's `id` of a worker artifact, which
-- fly reads when it uploads an input and names when it downloads an
-- output), beside its UUID. SQLite cannot add a column that counts by
-- itself: each new row takes one more than the highest id given.
ALTER TABLE artifacts ADD COLUMN int_id BIGINT;
UPDATE artifacts SET int_id = rowid;
CREATE UNIQUE INDEX artifacts_by_int_id ON artifacts (int_id);
CREATE TRIGGER artifacts_take_an_int_id AFTER INSERT ON artifacts
WHEN NEW.int_id IS NULL
BEGIN
    UPDATE artifacts SET int_id = (SELECT COALESCE(MAX(int_id), 0) + 1 FROM artifacts)
    WHERE rowid = NEW.rowid;
END;
