-- Worker identity and sealed secrets.
--
-- `identity_hash`: SHA-256 (hex) of the secret a worker was issued at its
-- first registration; a later registration under its name must present
-- that secret, until an admin prunes the worker (which deletes the row).
-- NULL: a row from before this migration, pinned at its next registration.
ALTER TABLE workers ADD COLUMN identity_hash TEXT;

-- The check of the key that seals stored secrets (agent tokens, stream
-- keys): one row, a known text sealed with the key the first web node
-- started with. A node whose key cannot open it refuses to start, so web
-- nodes sharing a database share one key.
CREATE TABLE seal_key_check (
    id INTEGER PRIMARY KEY,
    sealed TEXT NOT NULL
);
