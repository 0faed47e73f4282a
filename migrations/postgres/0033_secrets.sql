-- The built-in credential manager's secrets (`gantry set-secret`): a
-- team's, or one pipeline's of the team (`pipeline` '' for the team's).
-- `value` is always sealed with the web node's key (context
-- `secrets.value`); no API answer returns it.
CREATE TABLE secrets (
    id BIGSERIAL PRIMARY KEY,
    team TEXT NOT NULL,
    pipeline TEXT NOT NULL,
    name TEXT NOT NULL,
    value TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    UNIQUE (team, pipeline, name)
);
