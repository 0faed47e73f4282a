-- One-build workers (`gantry worker --ephemeral`): the build an ephemeral
-- worker took the steps of, set at its first placement (atomically, so two
-- web nodes never bind it to two builds) and kept until it is retired.
ALTER TABLE workers ADD COLUMN bound_build BIGINT;
