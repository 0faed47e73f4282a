-- Workers retired (`gantry retire-worker`, or `--retire-on-stop`), by the
-- incarnation that was retired: any web node refuses that incarnation's
-- heartbeats (410) and registrations, whichever node retired it. A new
-- incarnation of the name (the worker restarted) registers and clears it.
CREATE TABLE retired_workers (
    name TEXT PRIMARY KEY,
    incarnation TEXT NOT NULL,
    retired_at BIGINT NOT NULL
);
