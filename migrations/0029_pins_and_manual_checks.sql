-- A comment on a resource's pin by hand (`pin-resource --comment`,
-- Concourse's `pin_comment`): kept while the pin stands (pinning again
-- keeps it), gone with an unpin.
ALTER TABLE pipeline_resources ADD COLUMN pin_comment TEXT;
-- When a build triggered by hand found the checks of its inputs done
-- (unix ms; NULL before): from then on it waits for no check again, as
-- Concourse's `ResourcesChecked` stays true once a check ended after the
-- build was created.
ALTER TABLE builds ADD COLUMN inputs_checked_at BIGINT;
