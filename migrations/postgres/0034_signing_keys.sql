-- The key the web nodes sign `idtoken` var sources' tokens with (one per
-- purpose, made by the first node that needs it): its id (the JWT's
-- `kid`) and its PKCS#8 document, always sealed with the node's key
-- (context `signing_keys.pkcs8`). Its public half is served as JWKS.
CREATE TABLE signing_keys (
    id BIGSERIAL PRIMARY KEY,
    purpose TEXT NOT NULL UNIQUE,
    kid TEXT NOT NULL,
    pkcs8 TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
