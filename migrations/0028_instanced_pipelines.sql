-- Instances of instanced pipelines (Concourse's `instance_vars`): an
-- instance's name is `NAME/K:V,...` (its vars, canonical), so (team, name)
-- stays its identity; its instance vars as a JSON object (none: not an
-- instance), for listing.
ALTER TABLE pipelines ADD COLUMN instance_vars TEXT;
