-- An abort asked through a web node that does not run the build: the node
-- that runs it finds the request at its next heartbeat and aborts it.
ALTER TABLE builds ADD COLUMN abort_requested BIGINT;
