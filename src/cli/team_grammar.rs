//! The grammar of the team verbs (`teams`, `set-team`, `destroy-team`,
//! `tokens`, `token`, `audit`, `set-secret`, `secrets`, `destroy-secret`);
//! what each does is `teams.rs`. `set-team` names a team and who is what
//! in it (local users, and the providers' people and groups, each named
//! with its provider's prefix).

use clap::{Args, Subcommand};

use super::duration_flag::parse_duration_secs;

/// The team verbs: teams, their members, tokens and secrets, the audit log.
#[derive(Subcommand, Debug)]
pub enum TeamCommand {
    /// List teams (the admin sees all, a team token its own).
    Teams {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Create a team if it does not exist (admin), and give users and
    /// groups a role in it (the admin or the team's owner).
    SetTeam(SetTeamArgs),
    /// Remove a team and revoke its tokens (admin); refused while its
    /// builds run.
    DestroyTeam {
        /// Team name.
        name: String,
    },
    /// List team tokens, without their secrets.
    Tokens {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// The audit log: who changed what, oldest first (a team's owner sees
    /// its team's, the admin everyone's).
    Audit {
        /// Only this team's changes.
        #[arg(long)]
        team: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Make or revoke a team token (the admin, or the team's owner).
    Token {
        /// What to do.
        #[command(subcommand)]
        action: TokenCommand,
    },
    /// Store a secret in the built-in credential manager, sealed: its
    /// value is read from standard input (a trailing newline dropped); a
    /// pipeline's `((NAME))` reads it when a build needs it.
    SetSecret {
        /// The secret's name.
        name: String,
        /// The pipeline it belongs to (looked up first by that pipeline's
        /// builds); none: the team's.
        #[arg(short = 'p', long = "pipeline")]
        pipeline: Option<String>,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
    /// List a team's secrets: names and scopes, never values.
    Secrets {
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Destroy a secret of the built-in credential manager.
    DestroySecret {
        /// The secret's name.
        name: String,
        /// The pipeline it belongs to; none: the team's.
        #[arg(short = 'p', long = "pipeline")]
        pipeline: Option<String>,
        /// Team.
        #[arg(long, env = "GANTRY_TEAM", default_value = "main")]
        team: String,
    },
}

/// `gantry token ...`
#[derive(Subcommand, Debug)]
pub enum TokenCommand {
    /// Make a token for a team; prints it (the only time it is shown).
    Create {
        /// The team it acts for.
        #[arg(long)]
        team: String,
        /// Its role in the team: owner, member, pipeline-operator or viewer.
        #[arg(long, default_value = "member", value_parser = parse_role)]
        role: gantry_actors::api::Role,
        /// It expires after this long (e.g. `90s`, `12h`, `30d`); never by default.
        #[arg(long, value_parser = parse_duration_secs)]
        expires: Option<u64>,
        /// What it is for.
        #[arg(long)]
        description: Option<String>,
    },
    /// Revoke a token at once, by its id (`gantry tokens`).
    Revoke {
        /// The token's id.
        id: String,
    },
}

/// `gantry set-team NAME [--user U] [--group G] [--oidc-user U]
/// [--oidc-group G] [--github-user L] [--github-org O] [--github-team O:T]
/// [--role R] [--remove-user U] [--remove-group G]`.
#[derive(Args, Debug)]
pub struct SetTeamArgs {
    /// Team name.
    pub name: String,
    /// A local user (`[web.users]`) to give `--role` (repeatable).
    #[arg(long = "user")]
    pub users: Vec<String>,
    /// A person of the OpenID provider (`[web.oidc]`, by its user
    /// claim) to give `--role` (repeatable): the user `oidc:NAME`.
    #[arg(long = "oidc-user")]
    pub oidc_users: Vec<String>,
    /// A group, as stored (`oidc:NAME`, `github:ORG`,
    /// `github:ORG:TEAM`), to give `--role` (repeatable).
    #[arg(long = "group")]
    pub groups: Vec<String>,
    /// A group of the OpenID provider (its groups claim) to give
    /// `--role` (repeatable): the group `oidc:NAME`.
    #[arg(long = "oidc-group")]
    pub oidc_groups: Vec<String>,
    /// A GitHub login to give `--role` (repeatable): `github:LOGIN`.
    #[arg(long = "github-user")]
    pub github_users: Vec<String>,
    /// A GitHub organisation whose members get `--role` (repeatable).
    #[arg(long = "github-org")]
    pub github_orgs: Vec<String>,
    /// A GitHub team, `ORG:TEAM` (its slug), whose members get
    /// `--role` (repeatable).
    #[arg(long = "github-team")]
    pub github_teams: Vec<String>,
    /// The role the users and groups get: owner, member,
    /// pipeline-operator or viewer (as fly's set-team, owner by default).
    #[arg(long, default_value = "owner", value_parser = parse_role)]
    pub role: gantry_actors::api::Role,
    /// A user whose role in the team is taken away (repeatable).
    #[arg(long = "remove-user")]
    pub remove_users: Vec<String>,
    /// A group whose role in the team is taken away (repeatable).
    #[arg(long = "remove-group")]
    pub remove_groups: Vec<String>,
}

impl SetTeamArgs {
    /// The users and groups given `--role`, as stored: a provider's with
    /// its prefix (GitHub's lowercased, as its sign-ins name them).
    pub fn members(&self) -> (Vec<String>, Vec<String>) {
        let github = |n: &String| format!("github:{}", n.to_lowercase());
        let users = self
            .users
            .iter()
            .cloned()
            .chain(self.oidc_users.iter().map(|u| format!("oidc:{u}")))
            .chain(self.github_users.iter().map(github))
            .collect();
        let groups = self
            .groups
            .iter()
            .cloned()
            .chain(self.oidc_groups.iter().map(|g| format!("oidc:{g}")))
            .chain(
                self.github_orgs
                    .iter()
                    .chain(&self.github_teams)
                    .map(github),
            )
            .collect();
        (users, groups)
    }
}

/// A team role's name.
pub(crate) fn parse_role(s: &str) -> Result<gantry_actors::api::Role, String> {
    s.parse()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn providers_people_and_groups_are_named_with_their_prefix() {
        let args = SetTeamArgs {
            name: "red".into(),
            users: vec!["alice".into()],
            oidc_users: vec!["Bob".into()],
            groups: vec!["oidc:raw".into()],
            oidc_groups: vec!["ops".into()],
            github_users: vec!["Carol".into()],
            github_orgs: vec!["Acme".into()],
            github_teams: vec!["Acme:Web".into()],
            role: gantry_actors::api::Role::Member,
            remove_users: vec![],
            remove_groups: vec![],
        };
        let (users, groups) = args.members();
        assert_eq!(users, ["alice", "oidc:Bob", "github:carol"]);
        assert_eq!(
            groups,
            ["oidc:raw", "oidc:ops", "github:acme", "github:acme:web"]
        );
        assert!(parse_role("owner").is_ok() && parse_role("boss").is_err());
    }
}
