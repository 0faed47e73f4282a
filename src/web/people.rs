//! Local users (`[web.users]`): their argon2id password hashes, checked
//! on a bounded pool (`password_checks.rs`) after the throttle
//! (`sign_in_throttle.rs`) lets the attempt through. Which team roles a user has is the engine's
//! (`gantry set-team --user`); a sign-in (`api/sessions.rs`) turns a
//! checked password into an expiring, revocable token of one team.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, SaltString};
use argon2::Argon2;

use crate::web::client_address::counted_as;
use crate::web::password_checks::{self, Lane, PasswordChecks, Refused};
use crate::web::sign_in_throttle::Throttle;

/// The prefix of an OpenID provider's people and groups in teams
/// (`oidc:NAME`); a local user's name may not hold `:`.
pub const OIDC_PREFIX: &str = "oidc:";

/// The prefix of GitHub's people (`github:LOGIN`) and groups
/// (`github:ORG`, `github:ORG:TEAM`) in teams.
pub const GITHUB_PREFIX: &str = "github:";

/// Hashes `password` as an argon2id PHC string (the crate's defaults:
/// 19 MiB, 2 passes, 1 lane, OWASP's recommendation), for `[web.users]`.
pub fn hash_password(password: &str) -> Result<String, String> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| format!("hashing the password: {e}"))
}

/// The local users, how long their sign-ins last, and what bounds the
/// checking of their passwords.
#[derive(Debug, Clone)]
pub struct People {
    /// User name to argon2 PHC string, each checked at start.
    users: BTreeMap<String, Arc<str>>,
    /// A sign-in token's lifetime, in milliseconds.
    pub session_ttl_ms: i64,
    /// Wrong passwords by user name and by client address (this node's),
    /// taken before each check.
    throttle: Arc<Throttle>,
    /// The bounded pool the checks run on (none until the first user is
    /// configured: a node without users checks no password).
    checks: Option<Arc<PasswordChecks>>,
}

/// How the password checks of a node are bounded (`[web]`'s
/// `password_check_threads`, `password_check_queue`).
#[derive(Debug, Clone, Copy)]
pub struct CheckBounds {
    /// Threads checking at once (each holding one check's memory).
    pub threads: usize,
    /// Checks waiting for a thread at most.
    pub queue: usize,
}

/// Why a sign-in's password was not accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotChecked {
    /// Too many wrong passwords for this name or from this address: wait.
    Wait(std::time::Duration),
    /// The node checks as many passwords as it may now.
    Busy(Refused),
    /// The name or the password is wrong.
    Wrong,
}

/// A PHC string no password matches, checked when the user is unknown so
/// that an unknown name takes as long as a wrong password.
const NOBODY: &str = "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$pD3W2m8ETpQXLYlmIbcVpbW8MtO1W0aQF4Q9t1hO3fA";

impl People {
    /// Checks every hash of `users` (naming the user whose is not an
    /// argon2 PHC string) and, when there are any, starts the pool their
    /// passwords are checked on.
    pub fn new(
        users: &BTreeMap<String, String>,
        session_minutes: u64,
        bounds: CheckBounds,
    ) -> Result<Self, String> {
        let mut memory = password_checks::memory_of(NOBODY).unwrap_or_default();
        for (name, hash) in users {
            if name.contains(':') || name.is_empty() {
                return Err(format!(
                    "[web.users] {name:?}: a user name must be non-empty and hold no ':' (the provider's people are named oidc:NAME)"
                ));
            }
            let parsed = PasswordHash::new(hash).map_err(|e| {
                format!("[web.users] {name}: not a password hash ({e}); make one with `gantry hash-password`")
            })?;
            if !parsed.algorithm.as_str().starts_with("argon2") {
                return Err(format!(
                    "[web.users] {name}: a {} hash; give an argon2id one (`gantry hash-password`)",
                    parsed.algorithm
                ));
            }
            let m = password_checks::memory_of(hash).ok_or_else(|| {
                format!("[web.users] {name}: the hash's argon2 parameters are invalid; make one with `gantry hash-password`")
            })?;
            memory = memory.max(m);
        }
        if session_minutes == 0 {
            return Err("web.session_minutes must be at least 1".into());
        }
        if bounds.threads == 0 {
            return Err("web.password_check_threads must be at least 1".into());
        }
        let checks = if users.is_empty() {
            None
        } else {
            let pool = PasswordChecks::start(bounds.threads, bounds.queue, memory)
                .map_err(|e| format!("starting the password-check threads: {e}"))?;
            Some(Arc::new(pool))
        };
        Ok(Self {
            users: users
                .iter()
                .map(|(k, v)| (k.clone(), Arc::from(v.as_str())))
                .collect(),
            session_ttl_ms: i64::try_from(session_minutes.saturating_mul(60_000))
                .unwrap_or(i64::MAX),
            throttle: Default::default(),
            checks,
        })
    }

    /// Whether any local user is configured.
    pub fn any(&self) -> bool {
        !self.users.is_empty()
    }

    /// Whether `user` is a configured local user.
    pub fn knows(&self, user: &str) -> bool {
        self.users.contains_key(user)
    }

    /// Checks that `password` is `user`'s, for a sign-in from `client`:
    /// first the throttle (refusing at once past it), then the password
    /// on the bounded pool (refusing at once when it is full), then the
    /// outcome counted.
    pub async fn check(
        &self,
        client: IpAddr,
        user: &str,
        password: String,
    ) -> Result<(), NotChecked> {
        let Some(checks) = &self.checks else {
            return Err(NotChecked::Wrong);
        };
        let client = counted_as(client);
        let known = self.users.get(user);
        let attempt = self
            .throttle
            .attempt(user, client, known.is_some())
            .map_err(NotChecked::Wait)?;
        let hash = known.cloned().unwrap_or_else(|| Arc::from(NOBODY));
        let lane = match known {
            Some(_) => Lane::User,
            None => Lane::Unknown,
        };
        match checks.check(client, lane, hash, password).await {
            Ok(matches) => {
                let right = matches && known.is_some();
                self.throttle.outcome(attempt, right);
                right.then_some(()).ok_or(NotChecked::Wrong)
            }
            Err(refused) => {
                self.throttle.not_made(attempt);
                Err(NotChecked::Busy(refused))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: CheckBounds = CheckBounds {
        threads: 1,
        queue: 4,
    };

    #[tokio::test]
    async fn a_hashed_password_checks_and_nothing_else_does() {
        let hash = hash_password("s3cret pass").unwrap();
        assert!(hash.starts_with("$argon2id$"), "{hash}");
        let people = People::new(&BTreeMap::from([("alice".into(), hash)]), 60, BOUNDS).unwrap();
        let here: IpAddr = "192.0.2.1".parse().unwrap();
        assert_eq!(
            people.check(here, "alice", "s3cret pass".into()).await,
            Ok(())
        );
        assert_eq!(
            people.check(here, "alice", "s3cret pas".into()).await,
            Err(NotChecked::Wrong)
        );
        assert_eq!(
            people.check(here, "bob", "s3cret pass".into()).await,
            Err(NotChecked::Wrong)
        );
        // An unknown name is checked against a real hash, as long.
        assert!(PasswordHash::new(NOBODY).is_ok());
        assert_eq!(people.session_ttl_ms, 3_600_000);
        // No users: no pool, nothing matches.
        let none = People::new(&BTreeMap::new(), 60, BOUNDS).unwrap();
        assert!(none.checks.is_none());
        assert_eq!(
            none.check(here, "alice", "x".into()).await,
            Err(NotChecked::Wrong)
        );
        let err = People::new(
            &BTreeMap::from([("bob".into(), "plain".into())]),
            60,
            BOUNDS,
        )
        .unwrap_err();
        assert!(
            err.contains("bob") && err.contains("hash-password"),
            "{err}"
        );
    }
}
