-- Each team's allowance of build creations (`web.builds_per_team_per_minute`,
-- a token bucket: `n` at once, refilled at `n` a minute), kept in the
-- database so that every web node sharing it takes from the same bucket.
CREATE TABLE team_build_allowance (
    team TEXT PRIMARY KEY,
    tokens DOUBLE PRECISION NOT NULL,
    at_ms BIGINT NOT NULL
);
