//! The grammar of signing in (`login`, `logout`, `targets`, `status`,
//! `hash-password`), and what each does.

use clap::Subcommand;

use super::{people, ApiClient};

/// The verbs of signing in: targets, login, logout, status.
#[derive(Subcommand, Debug)]
pub enum SessionCommand {
    /// Sign in and save the web node as a target (`~/.gantryrc`,
    /// owner-only), as `fly login`: `gantry login -c URL -n TEAM -t NAME`
    /// prints the URL to sign in at through the node's OpenID provider
    /// and takes the token on a loopback callback; `-u USER` signs a local
    /// user in with a password instead. Then `-t NAME` on any command.
    Login {
        /// The web node's URL.
        #[arg(short = 'c', long = "api")]
        api: String,
        /// The team to act in; none: main, else the first you have a role in.
        #[arg(short = 'n', long = "team-name")]
        team: Option<String>,
        /// A local user's name (none: sign in through the provider).
        #[arg(short = 'u', long = "username")]
        username: Option<String>,
        /// The provider to sign in through, `oidc` or `github`, when the
        /// node has both.
        #[arg(long)]
        provider: Option<String>,
        /// The password; read from standard input when not given.
        #[arg(short = 'p', long = "password", hide_env_values = true)]
        password: Option<String>,
    },
    /// Sign out of a target: its token is revoked and forgotten.
    Logout,
    /// The saved targets (without their tokens).
    Targets {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Who the token of a target (or `--token`) is.
    Status,
    /// Print an argon2id hash of the password read from standard input,
    /// for `[web.users]`.
    HashPassword,
}

/// Runs one verb of signing in, `target` the `-t NAME` given; returns the
/// exit code.
pub async fn run(
    client: &ApiClient,
    target: Option<String>,
    command: SessionCommand,
) -> anyhow::Result<i32> {
    match command {
        SessionCommand::Login {
            api,
            team,
            username,
            password,
            provider,
        } => {
            let target = target.ok_or_else(|| {
                anyhow::anyhow!("name the target to save: gantry login -t NAME ...")
            })?;
            match username {
                Some(user) => people::login(&target, &api, team.as_deref(), &user, password).await,
                None if password.is_some() => {
                    Err(anyhow::anyhow!("-p needs -u: a password is a local user's"))
                }
                None => {
                    people::login_with_provider(&target, &api, team.as_deref(), provider.as_deref())
                        .await
                }
            }
        }
        SessionCommand::Logout => {
            let target = target.ok_or_else(|| {
                anyhow::anyhow!("name the target to sign out of: gantry logout -t NAME")
            })?;
            people::logout(&target).await
        }
        SessionCommand::Targets { json } => people::list(json),
        SessionCommand::Status => people::status(client).await,
        SessionCommand::HashPassword => people::hash_password(),
    }
    .map(|_| 0)
}
