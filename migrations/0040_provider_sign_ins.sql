-- A sign-in through a provider (`oidc`, `github`) under way: made when a
-- browser is sent to the provider, taken (deleted) when it comes back, so
-- a state is used once. Keyed by a hash of the state the provider hands
-- back; bound to the browser that started it by a hash of a cookie it was
-- given. Rows older than the sign-in's ten minutes are deleted as new ones
-- are made.
CREATE TABLE provider_sign_ins (
    state_hash TEXT PRIMARY KEY,
    provider TEXT NOT NULL,
    browser_hash TEXT NOT NULL,
    verifier TEXT NOT NULL,
    nonce TEXT NOT NULL,
    team TEXT,
    cli_port INTEGER,
    cli_state TEXT,
    created_at BIGINT NOT NULL
);
-- The provider's groups a sign-in's person was in when they signed in
-- (a JSON array; NULL: none, or a local user's token): the groups their
-- token's role is reckoned from until it expires.
ALTER TABLE api_tokens ADD COLUMN groups TEXT;
