//! Local users (`[web.users]`): their argon2id password hashes, checked
//! off the async threads. Which team roles a user has is the engine's
//! (`gantry set-team --user`); a sign-in (`api/sessions.rs`) turns a
//! checked password into an expiring, revocable token of one team.

use std::collections::BTreeMap;

use argon2::password_hash::rand_core::OsRng;
use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;

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

/// The local users and how long their sign-ins last.
#[derive(Debug, Clone, Default)]
pub struct People {
    /// User name to argon2 PHC string, each checked at start.
    users: BTreeMap<String, String>,
    /// A sign-in token's lifetime, in milliseconds.
    pub session_ttl_ms: i64,
    /// Wrong passwords by user name (this node's).
    failures: std::sync::Arc<dashmap::DashMap<String, Failures>>,
}

/// A user name's wrong passwords in a row, and until when it is refused.
#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    until: std::time::Instant,
}

/// Wrong passwords in a row a user name may have before its sign-ins
/// wait: then 1 s, doubling with each further one, at most 5 minutes.
const FREE_FAILURES: u32 = 5;

/// The most user names whose wrong passwords are counted at once: names
/// are chosen by whoever calls the open sign-in route, so the count must
/// not grow with them. Past it, names no longer waiting are forgotten,
/// then new names are not counted.
const MAX_TRACKED: usize = 10_000;
const MAX_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

/// A PHC string no password matches, checked when the user is unknown so
/// that an unknown name takes as long as a wrong password.
const NOBODY: &str = "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$pD3W2m8ETpQXLYlmIbcVpbW8MtO1W0aQF4Q9t1hO3fA";

impl People {
    /// Checks every hash of `users` (naming the user whose is not an
    /// argon2 PHC string).
    pub fn new(users: &BTreeMap<String, String>, session_minutes: u64) -> Result<Self, String> {
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
        }
        if session_minutes == 0 {
            return Err("web.session_minutes must be at least 1".into());
        }
        Ok(Self {
            users: users.clone(),
            session_ttl_ms: i64::try_from(session_minutes.saturating_mul(60_000))
                .unwrap_or(i64::MAX),
            failures: Default::default(),
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

    /// How long `user`'s sign-ins must still wait after wrong passwords
    /// (`None`: they may try now).
    pub fn throttled(&self, user: &str) -> Option<std::time::Duration> {
        let f = *self.failures.get(user)?;
        f.until.checked_duration_since(std::time::Instant::now())
    }

    /// Counts a sign-in's outcome for `user`: a wrong password (which may
    /// make the next ones wait), or a right one (which forgets the wrong).
    pub fn outcome(&self, user: &str, right: bool) {
        if right {
            self.failures.remove(user);
            return;
        }
        if !self.failures.contains_key(user) && self.failures.len() >= MAX_TRACKED {
            let now = std::time::Instant::now();
            self.failures.retain(|_, f| f.until > now);
            if self.failures.len() >= MAX_TRACKED {
                return;
            }
        }
        let mut f = self.failures.entry(user.to_string()).or_insert(Failures {
            count: 0,
            until: std::time::Instant::now(),
        });
        f.count += 1;
        if f.count >= FREE_FAILURES {
            let doublings = (f.count - FREE_FAILURES).min(16);
            let wait = std::time::Duration::from_secs(1 << doublings).min(MAX_WAIT);
            f.until = std::time::Instant::now() + wait;
        }
    }

    /// Whether `password` is `user`'s (slow on purpose: run it off the
    /// async threads).
    pub fn check(&self, user: &str, password: &str) -> bool {
        let (hash, known) = match self.users.get(user) {
            Some(h) => (h.as_str(), true),
            None => (NOBODY, false),
        };
        let Ok(parsed) = PasswordHash::new(hash) else {
            return false;
        };
        let matches = Argon2::default()
            .verify_password(password.as_bytes(), &parsed)
            .is_ok();
        known && matches
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hashed_password_checks_and_nothing_else_does() {
        let hash = hash_password("s3cret pass").unwrap();
        assert!(hash.starts_with("$argon2id$"), "{hash}");
        let people = People::new(&BTreeMap::from([("alice".into(), hash)]), 60).unwrap();
        assert!(people.check("alice", "s3cret pass"));
        assert!(!people.check("alice", "s3cret pas"));
        assert!(!people.check("bob", "s3cret pass"));
        // An unknown name is checked against a real hash, as long.
        assert!(PasswordHash::new(NOBODY).is_ok());
        assert_eq!(people.session_ttl_ms, 3_600_000);
        // Wrong passwords: four free, then a wait that doubles; a right
        // one forgets them.
        for _ in 0..FREE_FAILURES - 1 {
            people.outcome("alice", false);
            assert_eq!(people.throttled("alice"), None);
        }
        people.outcome("alice", false);
        let wait = people.throttled("alice").unwrap();
        assert!(wait <= std::time::Duration::from_secs(1), "{wait:?}");
        people.outcome("alice", false);
        let wait = people.throttled("alice").unwrap();
        assert!(wait > std::time::Duration::from_secs(1), "{wait:?}");
        assert_eq!(people.throttled("bob"), None, "per user name");
        people.outcome("alice", true);
        assert_eq!(people.throttled("alice"), None);
        // Names sprayed at the open route: the count stays bounded, and a
        // name that waits is kept.
        for _ in 0..FREE_FAILURES {
            people.outcome("bob", false);
        }
        for i in 0..MAX_TRACKED + 50 {
            people.outcome(&format!("sprayed-{i}"), false);
        }
        assert!(
            people.failures.len() <= MAX_TRACKED,
            "{}",
            people.failures.len()
        );
        assert!(people.throttled("bob").is_some());
        let err = People::new(&BTreeMap::from([("bob".into(), "plain".into())]), 60).unwrap_err();
        assert!(
            err.contains("bob") && err.contains("hash-password"),
            "{err}"
        );
    }
}
