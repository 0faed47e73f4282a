-- The turns a job build waits for before its plan starts (Concourse's job
-- `serial`, `serial_groups` and `max_in_flight`): for each key (the job, or
-- a serial group, of a team's pipeline) at most `max_in_flight` builds run
-- at once, in the order they were created. Any web node decides from these
-- rows and the builds' statuses alone, so no two nodes disagree (a build
-- and its rows are written in one transaction, on PostgreSQL under a lock
-- per key, so a key's builds become visible in the order of their ids).
CREATE TABLE build_turns (
    build_id BIGINT NOT NULL,
    turn_key TEXT NOT NULL,
    max_in_flight BIGINT NOT NULL,
    PRIMARY KEY (build_id, turn_key)
);
CREATE INDEX build_turns_by_key ON build_turns (turn_key, build_id);
