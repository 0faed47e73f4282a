-- Who is what in a team: a user or a group (`kind`) with one of the
-- team's roles. A user's role in a team is the highest its name or any of
-- its groups is given. Removed with the team.
CREATE TABLE team_roles (
    team TEXT NOT NULL,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    role TEXT NOT NULL,
    PRIMARY KEY (team, kind, name)
);
-- A token made at sign-in is a person's: it names them (NULL: a team
-- token made with `gantry token create`).
ALTER TABLE api_tokens ADD COLUMN user_name TEXT;
