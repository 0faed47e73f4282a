-- Who did what: every change made through the API (setting, pausing and
-- destroying pipelines, triggering and aborting builds, pinning,
-- secrets by name, teams and tokens), one row per request that
-- succeeded. `team` is the team the change was made in (NULL: the
-- fleet's, such as a worker's); `actor` who made it (`admin`,
-- `token:ID`, `config-token:TEAM`); `action` the API's operationId;
-- `target` the request's path (never its body: a secret's value is not
-- kept); `status` the answer's HTTP status.
CREATE TABLE audit_log (
    id BIGSERIAL PRIMARY KEY,
    at BIGINT NOT NULL,
    team TEXT,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    status INTEGER NOT NULL
);
CREATE INDEX audit_log_by_team ON audit_log (team, id);
