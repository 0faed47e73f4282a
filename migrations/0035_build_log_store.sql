-- Where a finished build's log went (log_store.rs): the artifact store's
-- object of this name (empty: the build had no event), once its events
-- left build_events; their count, their JSON's bytes, and the object's
-- bytes (zstd); and whether rows of a moved log are still to be deleted
-- (1 until they are: a node stopped mid-way leaves some).
ALTER TABLE builds ADD COLUMN log_key TEXT;
ALTER TABLE builds ADD COLUMN log_events BIGINT;
ALTER TABLE builds ADD COLUMN log_bytes BIGINT;
ALTER TABLE builds ADD COLUMN log_stored_bytes BIGINT;
ALTER TABLE builds ADD COLUMN log_rows_left INTEGER;
-- What each pass of the mover reads: the builds whose log is still in the
-- database (running ones, and finished ones not moved yet), those whose
-- moved log still has rows, and reaped ones whose object is still stored.
CREATE INDEX builds_log_in_database ON builds (id) WHERE log_key IS NULL AND log_reaped_at IS NULL;
CREATE INDEX builds_log_rows_left ON builds (id) WHERE log_rows_left IS NOT NULL;
CREATE INDEX builds_log_reaped_in_store ON builds (id) WHERE log_key IS NOT NULL AND log_reaped_at IS NOT NULL;
