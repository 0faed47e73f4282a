-- Version histories are shared within a team only (a team is the trust
-- boundary, see `actors/src/resources/scope.rs`). The global history `*`,
-- which every team's pipelines shared, is copied into `team:{team}` for
-- each team whose pipeline resources (or resource types) kept their
-- versions there, and those rows now name the team's own. A config's last
-- check build is kept only for the team that ran it. Nothing is keyed `*`
-- afterwards.
INSERT INTO resource_versions (team, config, version, metadata, check_order, created_at)
SELECT DISTINCT 'team:' || p.team, v.config, v.version, v.metadata, v.check_order, v.created_at
FROM resource_versions v
JOIN (SELECT pipeline_id, config FROM pipeline_resources WHERE scope = '*'
      UNION SELECT pipeline_id, config FROM pipeline_resource_types WHERE scope = '*') r
  ON r.config = v.config
JOIN pipelines p ON p.id = r.pipeline_id
WHERE v.team = '*';

INSERT INTO resource_checks (scope, config, next_check_at, last_build)
SELECT DISTINCT 'team:' || p.team, c.config, c.next_check_at,
    (SELECT b.id FROM builds b WHERE b.id = c.last_build AND b.team = p.team)
FROM resource_checks c
JOIN (SELECT pipeline_id, config FROM pipeline_resources WHERE scope = '*'
      UNION SELECT pipeline_id, config FROM pipeline_resource_types WHERE scope = '*') r
  ON r.config = c.config
JOIN pipelines p ON p.id = r.pipeline_id
WHERE c.scope = '*';

UPDATE pipeline_resources
SET scope = 'team:' || (SELECT p.team FROM pipelines p WHERE p.id = pipeline_resources.pipeline_id)
WHERE scope = '*' AND EXISTS (SELECT 1 FROM pipelines p WHERE p.id = pipeline_resources.pipeline_id);

UPDATE pipeline_resource_types
SET scope = 'team:' || (SELECT p.team FROM pipelines p WHERE p.id = pipeline_resource_types.pipeline_id)
WHERE scope = '*' AND EXISTS (SELECT 1 FROM pipelines p WHERE p.id = pipeline_resource_types.pipeline_id);

DELETE FROM resource_checks WHERE scope = '*';
DELETE FROM resource_versions WHERE team = '*';
