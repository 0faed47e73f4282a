-- The order of a team's pipelines (Concourse's `order-pipelines`): the
-- place each was given, from 0; pipelines never ordered (NULL) follow the
-- ordered ones, by name.
ALTER TABLE pipelines ADD COLUMN ordering BIGINT;
