-- An abort asked through a web node that does not run the build: the node
-- that runs it finds the request at its next heartbeat and aborts it.
ALTER TABLE builds ADD COLUMN abort_requested BIGINT;

-- Each worker's volume store usage as its last sweep report gave it, and
-- how many reports gave one: the disk-pressure rule reads them on whichever
-- node leads the Collector, whichever node received the reports.
ALTER TABLE workers ADD COLUMN volume_store_used BIGINT;
ALTER TABLE workers ADD COLUMN volume_store_total BIGINT;
ALTER TABLE workers ADD COLUMN volume_store_reports BIGINT NOT NULL DEFAULT 0;

-- The identity of the artifact store the web nodes share: every node must
-- mount the same directory (`artifacts_dir`), which holds the same id in
-- its `.store-id` file.
CREATE TABLE artifact_store (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    store_id TEXT NOT NULL
);
