-- A comment on a resource's pin by hand (`pin-resource --comment`,
-- Concourse's `pin_comment`): kept while the pin stands (pinning again
-- keeps it), gone with an unpin.
ALTER TABLE pipeline_resources ADD COLUMN pin_comment TEXT;
