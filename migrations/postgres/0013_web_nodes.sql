-- Several web nodes on one database (PostgreSQL). Times are unix ms.
--
-- `web_nodes`: each running node's heartbeat. A node whose `last_seen` is
-- older than the node timeout is dead: the node that deletes its row takes
-- its unfinished builds over (`builds.web_node`).
CREATE TABLE web_nodes (
    name TEXT PRIMARY KEY,
    started_at BIGINT NOT NULL,
    last_seen BIGINT NOT NULL
);

-- `placements`: what each placed step holds on its worker until released,
-- the load the `limit-*` strategies count. Every node places under one
-- transaction-scoped advisory lock, reading the sums of this table, so
-- limits hold across nodes.
CREATE TABLE placements (
    id BIGSERIAL PRIMARY KEY,
    worker TEXT NOT NULL,
    build_id BIGINT,
    web_node TEXT NOT NULL,
    tasks BIGINT NOT NULL,
    containers BIGINT NOT NULL,
    volumes BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX placements_by_build ON placements (build_id);
CREATE INDEX placements_by_node ON placements (web_node);

-- `intercept_sessions`: open `gantry hijack` sessions, so that no node's
-- garbage collector destroys a container someone works in.
CREATE TABLE intercept_sessions (
    id BIGSERIAL PRIMARY KEY,
    container TEXT NOT NULL,
    web_node TEXT NOT NULL,
    opened_at BIGINT NOT NULL
);
CREATE INDEX intercept_sessions_by_container ON intercept_sessions (container);
