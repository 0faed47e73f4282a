-- The plan node (its position and attempts, as node events give them) of
-- the step that created a build's container or volume, so a web node that
-- takes the build over finds each step's own handles again.
ALTER TABLE containers ADD COLUMN node TEXT;
ALTER TABLE volumes ADD COLUMN node TEXT;
