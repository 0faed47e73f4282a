-- Gantry schema, SQLite flavour. Times are unix milliseconds.
CREATE TABLE teams (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL
);
INSERT INTO teams (name, created_at) VALUES ('main', 0);

CREATE TABLE workers (
    name TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    registration TEXT NOT NULL,
    containers BIGINT NOT NULL DEFAULT 0,
    volumes BIGINT NOT NULL DEFAULT 0,
    last_heartbeat BIGINT NOT NULL,
    next_sequence BIGINT NOT NULL DEFAULT 1
);

CREATE TABLE builds (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    team TEXT NOT NULL,
    status TEXT NOT NULL,
    plan TEXT NOT NULL,
    worker TEXT,
    exit_status BIGINT,
    error TEXT,
    created_at BIGINT NOT NULL,
    finished_at BIGINT
);

CREATE TABLE build_events (
    build_id BIGINT NOT NULL,
    seq BIGINT NOT NULL,
    event TEXT NOT NULL,
    PRIMARY KEY (build_id, seq)
);

CREATE TABLE artifacts (
    id TEXT PRIMARY KEY,
    team TEXT NOT NULL,
    name TEXT,
    build_id BIGINT,
    size_bytes BIGINT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE volumes (
    handle TEXT PRIMARY KEY,
    worker TEXT NOT NULL,
    state TEXT NOT NULL,
    sequence BIGINT NOT NULL,
    build_id BIGINT,
    step TEXT,
    team TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE containers (
    handle TEXT PRIMARY KEY,
    worker TEXT NOT NULL,
    state TEXT NOT NULL,
    sequence BIGINT NOT NULL,
    build_id BIGINT,
    step TEXT,
    team TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
