-- An integer id per artifact (Concourse's `id` of a worker artifact, which
-- fly reads when it uploads an input and names when it downloads an
-- output), beside its UUID.
ALTER TABLE artifacts ADD COLUMN int_id BIGSERIAL;
CREATE UNIQUE INDEX artifacts_by_int_id ON artifacts (int_id);
