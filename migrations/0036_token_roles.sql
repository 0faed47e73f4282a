-- A team token's role in its team (owner, member, pipeline-operator or
-- viewer). Tokens made before roles could do what a member does, so they
-- keep that.
ALTER TABLE api_tokens ADD COLUMN role TEXT NOT NULL DEFAULT 'member';
