-- The web node that runs a build. A restarting web node only settles its own
-- unfinished builds, never those of other web nodes sharing the database.
ALTER TABLE builds ADD COLUMN web_node TEXT;
