-- The columns whose plain values written before sealing began have all been
-- sealed (db/at_rest.rs): a start finds a row here and scans no table.
CREATE TABLE sealed_at_rest (
    columns TEXT PRIMARY KEY,
    sealed_at BIGINT NOT NULL
);
