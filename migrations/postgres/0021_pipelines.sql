-- Pipelines set with `gantry set-pipeline`, per team: the YAML text as
-- given and its vars, a version counted from 1 per pipeline (a write naming
-- a stale version is refused), and whether it is paused (new pipelines
-- start paused, as in Concourse).
CREATE TABLE pipelines (
    id BIGSERIAL PRIMARY KEY,
    team TEXT NOT NULL,
    name TEXT NOT NULL,
    config TEXT NOT NULL,
    vars TEXT NOT NULL DEFAULT '{}',
    config_version BIGINT NOT NULL,
    paused BIGINT NOT NULL DEFAULT 1,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    UNIQUE (team, name)
);

-- The jobs of the stored pipelines: paused or not, the next per-job build
-- number, and what the last scheduling round decided (JSON, for `why`).
CREATE TABLE pipeline_jobs (
    pipeline_id BIGINT NOT NULL,
    name TEXT NOT NULL,
    paused BIGINT NOT NULL DEFAULT 0,
    next_build_number BIGINT NOT NULL DEFAULT 1,
    decision TEXT,
    PRIMARY KEY (pipeline_id, name)
);

-- The resources of the stored pipelines: where their versions are kept
-- (`scope`, `config`: the key of `resource_versions`), a pinned version.
CREATE TABLE pipeline_resources (
    pipeline_id BIGINT NOT NULL,
    name TEXT NOT NULL,
    scope TEXT NOT NULL,
    config TEXT NOT NULL,
    check_every_ms BIGINT,
    pinned TEXT,
    PRIMARY KEY (pipeline_id, name)
);
CREATE INDEX pipeline_resources_by_config ON pipeline_resources (scope, config);

-- The resource types of the stored pipelines, checked periodically as
-- resources are: where the versions of each type's image are kept
-- (`scope`, `config`), and how often it is checked.
CREATE TABLE pipeline_resource_types (
    pipeline_id BIGINT NOT NULL,
    name TEXT NOT NULL,
    scope TEXT NOT NULL,
    config TEXT NOT NULL,
    check_every_ms BIGINT,
    PRIMARY KEY (pipeline_id, name)
);
CREATE INDEX pipeline_resource_types_by_config ON pipeline_resource_types (config, scope);

-- When each resource config (scope, config) is checked next, and its last
-- check build: one check serves every pipeline resource naming it.
CREATE TABLE resource_checks (
    scope TEXT NOT NULL,
    config TEXT NOT NULL,
    next_check_at BIGINT NOT NULL,
    last_build BIGINT,
    PRIMARY KEY (scope, config)
);

-- The versions a build of a pipeline job used (`in`: its gets) and made
-- (`out`: its puts), by step name and resource: what `passed` reads.
CREATE TABLE build_versions (
    build_id BIGINT NOT NULL,
    direction TEXT NOT NULL,
    name TEXT NOT NULL,
    resource TEXT NOT NULL,
    version TEXT NOT NULL,
    PRIMARY KEY (build_id, direction, name)
);
CREATE INDEX build_versions_by_version ON build_versions (resource, version, build_id);

-- Versions of a pipeline's resource disabled by hand: never used as inputs.
CREATE TABLE disabled_versions (
    pipeline_id BIGINT NOT NULL,
    resource TEXT NOT NULL,
    version TEXT NOT NULL,
    PRIMARY KEY (pipeline_id, resource, version)
);

ALTER TABLE builds ADD COLUMN build_number BIGINT;

-- A build triggered by hand whose inputs cannot be satisfied yet waits,
-- pending, with why (its plan is written once they can): no web node runs
-- or takes it over until then.
ALTER TABLE builds ADD COLUMN waiting TEXT;
CREATE INDEX builds_waiting ON builds (id) WHERE waiting IS NOT NULL;
