-- A rerun (`rerun-build`, Concourse's `RerunBuild`): a job build run
-- with the inputs another build of the job was given. `rerun_of` is the
-- original build's id (a rerun of a rerun reruns the original), and
-- `rerun_number` its place among that build's reruns: the build is
-- named `N.M` (its `build_number` is the original's N).
ALTER TABLE builds ADD COLUMN rerun_of BIGINT;
ALTER TABLE builds ADD COLUMN rerun_number BIGINT;
