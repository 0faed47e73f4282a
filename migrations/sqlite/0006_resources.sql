-- Versions that `check` found for a resource config: a team's (type
-- chain, source), identified by the hash `config`. The newest version has
-- the highest check_order; a version reported again moves to the newest.
CREATE TABLE resource_versions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    team TEXT NOT NULL,
    config TEXT NOT NULL,
    version TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '[]',
    check_order BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    UNIQUE (team, config, version)
);
CREATE INDEX resource_versions_by_order ON resource_versions (team, config, check_order);

-- What a resource's `in` fetched, kept once per (config, version, params):
-- the hash `key` names it; the artifact holds the files (or, for an image
-- fetched for a task or a resource type, the root filesystem).
CREATE TABLE resource_caches (
    team TEXT NOT NULL,
    key TEXT NOT NULL,
    artifact_id TEXT NOT NULL,
    version TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '[]',
    worker TEXT,
    image_env TEXT,
    image_user TEXT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (team, key)
);
