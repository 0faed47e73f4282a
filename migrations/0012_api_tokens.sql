-- Team tokens made through the API (`gantry token create`): only a hash of
-- the secret is stored. A token reads `gtk_<id>_<secret>`; `id` finds the
-- row, and the SHA-256 of the whole token must equal `token_hash`. Times are
-- unix milliseconds; `expires_at` NULL never expires; a revoked token keeps
-- its row (with `revoked_at`) so listings can say so.
CREATE TABLE api_tokens (
    id TEXT PRIMARY KEY,
    team TEXT NOT NULL,
    token_hash TEXT NOT NULL,
    description TEXT,
    created_at BIGINT NOT NULL,
    expires_at BIGINT,
    revoked_at BIGINT
);
CREATE INDEX api_tokens_by_team ON api_tokens (team);
