-- The sweep loads every row of one worker at each report: an index on the
-- worker keeps that one query cheap on a large table (volumes already have
-- one led by the worker, `volumes_by_artifact`).
CREATE INDEX containers_by_worker ON containers (worker);
