-- Steps waiting for a worker (every compatible worker is at its limits),
-- one row per step while it waits, written by the web node running its
-- build: what `GET /api/v1/queue` and `gantry_steps_waiting` read, so an
-- autoscaler sees the whole fleet's queue through any node. `tags` are
-- sorted and comma-joined. A node's rows go when it starts again or is
-- taken over.
CREATE TABLE waiting_steps (
    id TEXT PRIMARY KEY,
    web_node TEXT NOT NULL,
    build_id BIGINT NOT NULL,
    step TEXT NOT NULL,
    team TEXT NOT NULL,
    platform TEXT NOT NULL,
    tags TEXT NOT NULL,
    resource_type TEXT,
    privileged BIGINT NOT NULL,
    reason TEXT NOT NULL,
    since BIGINT NOT NULL
);
CREATE INDEX waiting_steps_by_node ON waiting_steps (web_node);
CREATE INDEX waiting_steps_by_since ON waiting_steps (since);
