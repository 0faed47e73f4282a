//! How many wrong passwords a sign-in may follow: taken *before* the slow
//! check, atomically, so that checks run at once cannot all slip past it.
//! Every attempt counts as wrong until its check says otherwise; past an
//! allowance a key waits (1 s, doubling with each further wrong password,
//! at most 5 minutes) and, between waits, one attempt at a time is let
//! through.
//!
//! Two keys are taken for each attempt: the client's address (all the
//! names it tries: random names do not go round it), and the user name.
//! The trade-off chosen against locking people out: a user name's count
//! does not stop the addresses that user signed in from before on this
//! node (the last [`KNOWN_PLACES`] of each); from those, the count is of
//! the user name *at that address*. So anyone can slow guesses at a name
//! from everywhere else, but the user, where they signed in before, keeps
//! signing in. The counts are this node's (several nodes each keep their
//! own).

use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use dashmap::DashMap;

/// Wrong passwords a user name may have (or at one of its known places)
/// before its sign-ins wait.
pub const FREE_PER_USER: u32 = 5;

/// Wrong passwords a client address may have, over all the names it
/// tries, before its sign-ins wait (several people may share one address).
pub const FREE_PER_ADDRESS: u32 = 20;

/// The longest wait.
const MAX_WAIT: Duration = Duration::from_secs(300);

/// A key's wrong passwords are forgotten after this long with none.
const FORGET_AFTER: Duration = Duration::from_secs(15 * 60);

/// The most keys counted at once that are no configured user's (names
/// and addresses are chosen by whoever calls the open route). Past it,
/// keys no longer waiting are forgotten, then new ones are not counted
/// (their checks still take the pool, which is bounded).
const MAX_TRACKED: usize = 100_000;

/// How many addresses a user's sign-ins are remembered from.
pub const KNOWN_PLACES: usize = 8;

/// What is counted.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    /// A client address, whatever names it tries.
    Address(IpAddr),
    /// A user name, from anywhere but its known places.
    User(String),
    /// A user name at one of its known places.
    UserAt(String, IpAddr),
}

/// A key's count.
#[derive(Debug, Clone, Copy)]
struct Count {
    /// Wrong passwords in a row.
    wrong: u32,
    /// Attempts being checked now (each counted as wrong until known).
    checking: u32,
    /// Until when the key waits.
    until: Instant,
    /// The last change.
    last: Instant,
}

/// An attempt let through: give its outcome with [`Throttle::outcome`].
#[derive(Debug)]
#[must_use]
pub struct Attempt {
    keys: Vec<Key>,
    user: String,
    client: IpAddr,
}

/// The sign-in throttle of a web node.
#[derive(Debug, Default)]
pub struct Throttle {
    counts: DashMap<Key, Count>,
    /// Each configured user's last addresses signed in from.
    places: DashMap<String, VecDeque<IpAddr>>,
    /// When the counts were last swept of forgotten keys (a sweep walks
    /// them all: at most one a second).
    swept: std::sync::Mutex<Option<Instant>>,
}

impl Throttle {
    /// Takes an attempt of `user` from `client` (`configured`: the name is
    /// a configured user's, always counted), or says how long to wait.
    pub fn attempt(
        &self,
        user: &str,
        client: IpAddr,
        configured: bool,
    ) -> Result<Attempt, Duration> {
        let known_place = self
            .places
            .get(user)
            .is_some_and(|places| places.contains(&client));
        let user_key = if known_place {
            Key::UserAt(user.to_string(), client)
        } else {
            Key::User(user.to_string())
        };
        let keys = [
            (Key::Address(client), FREE_PER_ADDRESS, false),
            (user_key, FREE_PER_USER, configured),
        ];
        let mut taken = Vec::with_capacity(keys.len());
        for (key, free, always) in keys {
            match self.take(&key, free, always) {
                Ok(true) => taken.push(key),
                Ok(false) => {}
                Err(wait) => {
                    for k in &taken {
                        self.settle(k, None);
                    }
                    return Err(wait);
                }
            }
        }
        Ok(Attempt {
            keys: taken,
            user: user.to_string(),
            client,
        })
    }

    /// Counts the outcome of `attempt`: a wrong password (which may make
    /// the next ones wait), or a right one (which forgets the user name's
    /// wrong ones and remembers where it signed in from).
    pub fn outcome(&self, attempt: Attempt, right: bool) {
        for key in &attempt.keys {
            let wrong = match (right, key) {
                (false, _) => Some(true),
                // An address's count is of wrong passwords over all the
                // names it tries: one right one does not forget them.
                (true, Key::Address(_)) => None,
                (true, _) => Some(false),
            };
            self.settle(key, wrong);
        }
        if right {
            let mut places = self.places.entry(attempt.user).or_default();
            places.retain(|p| *p != attempt.client);
            places.push_back(attempt.client);
            while places.len() > KNOWN_PLACES {
                places.pop_front();
            }
        }
    }

    /// Gives back `attempt`, whose check was not made (the pool was full).
    pub fn not_made(&self, attempt: Attempt) {
        for key in &attempt.keys {
            self.settle(key, None);
        }
    }

    /// Takes an attempt on `key`: `Ok(true)` counted, `Ok(false)` not
    /// counted (too many keys), `Err` how long to wait.
    fn take(&self, key: &Key, free: u32, always: bool) -> Result<bool, Duration> {
        let now = Instant::now();
        if !always && !self.counts.contains_key(key) && self.counts.len() >= MAX_TRACKED {
            let sweep = {
                let mut swept = self.swept.lock().unwrap_or_else(|e| e.into_inner());
                let due = swept.is_none_or(|at| now - at >= Duration::from_secs(1));
                if due {
                    *swept = Some(now);
                }
                due
            };
            if sweep {
                self.counts
                    .retain(|_, c| c.checking > 0 || c.until > now || now - c.last < FORGET_AFTER);
            }
            if self.counts.len() >= MAX_TRACKED {
                return Ok(false);
            }
        }
        let mut c = self.counts.entry(key.clone()).or_insert(Count {
            wrong: 0,
            checking: 0,
            until: now,
            last: now,
        });
        if c.checking == 0 && now.saturating_duration_since(c.last) > FORGET_AFTER {
            c.wrong = 0;
        }
        if c.wrong + c.checking >= free {
            if c.until > now {
                return Err(c.until - now);
            }
            if c.checking > 0 {
                // One attempt at a time past the allowance.
                return Err(Duration::from_secs(1));
            }
        }
        c.checking += 1;
        c.last = now;
        Ok(true)
    }

    /// Ends an attempt on `key`: `Some(true)` a wrong password,
    /// `Some(false)` a right one (the count is forgotten), `None` not made.
    fn settle(&self, key: &Key, wrong: Option<bool>) {
        let now = Instant::now();
        let free = match key {
            Key::Address(_) => FREE_PER_ADDRESS,
            _ => FREE_PER_USER,
        };
        let Some(mut c) = self.counts.get_mut(key) else {
            return;
        };
        c.checking = c.checking.saturating_sub(1);
        c.last = now;
        match wrong {
            Some(true) => {
                c.wrong += 1;
                if c.wrong >= free {
                    let doublings = (c.wrong - free).min(16);
                    c.until = now + Duration::from_secs(1 << doublings).min(MAX_WAIT);
                }
            }
            Some(false) => {
                c.wrong = 0;
                c.until = now;
            }
            None => {}
        }
        let idle = c.wrong == 0 && c.checking == 0;
        drop(c);
        if idle {
            self.counts
                .remove_if(key, |_, c| c.wrong == 0 && c.checking == 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn attempts_are_counted_before_their_check_so_a_burst_gets_only_the_allowance() {
        let t = Throttle::default();
        let here = ip("192.0.2.1");
        // Forty at once, none settled yet: only the allowance goes.
        let (mut through, mut waited) = (vec![], 0);
        for _ in 0..40 {
            match t.attempt("alice", here, true) {
                Ok(a) => through.push(a),
                Err(_) => waited += 1,
            }
        }
        assert_eq!((through.len(), waited), (FREE_PER_USER as usize, 35));
        for a in through {
            t.outcome(a, false);
        }
        let wait = t.attempt("alice", here, true).unwrap_err();
        assert!(wait <= Duration::from_secs(1), "{wait:?}");
        assert!(t.attempt("bob", here, true).is_ok(), "per user name");
    }

    #[test]
    fn right_passwords_never_make_an_address_wait() {
        let t = Throttle::default();
        let here = ip("192.0.2.1");
        for _ in 0..FREE_PER_ADDRESS * 3 {
            let a = t.attempt("alice", here, true).expect("no wait");
            t.outcome(a, true);
        }
    }

    #[test]
    fn a_user_locked_out_still_signs_in_from_where_they_did_before() {
        let t = Throttle::default();
        let (home, attacker) = (ip("192.0.2.1"), ip("198.51.100.7"));
        let a = t.attempt("alice", home, true).unwrap();
        t.outcome(a, true);
        for _ in 0..FREE_PER_USER {
            let a = t.attempt("alice", attacker, true).unwrap();
            t.outcome(a, false);
        }
        assert!(t.attempt("alice", attacker, true).is_err());
        assert!(
            t.attempt("alice", ip("203.0.113.9"), true).is_err(),
            "everywhere else waits"
        );
        let a = t.attempt("alice", home, true).expect("her known place");
        t.outcome(a, true);
    }

    #[test]
    fn one_address_spraying_names_waits_and_the_count_stays_bounded() {
        let t = Throttle::default();
        let sprayer = ip("198.51.100.7");
        for i in 0..FREE_PER_ADDRESS {
            let a = t.attempt(&format!("u{i}"), sprayer, false).unwrap();
            t.outcome(a, false);
        }
        assert!(t.attempt("fresh-name", sprayer, false).is_err());
        assert!(t.attempt("fresh-name", ip("192.0.2.1"), false).is_ok());
        // Many addresses and names: bounded.
        for i in 0..MAX_TRACKED as u32 + 10 {
            let addr = IpAddr::from(i.to_be_bytes());
            if let Ok(a) = t.attempt(&format!("n{i}"), addr, false) {
                t.outcome(a, false);
            }
        }
        assert!(t.counts.len() <= MAX_TRACKED + 2, "{}", t.counts.len());
        // A configured user is counted all the same.
        for _ in 0..FREE_PER_USER {
            let a = t.attempt("alice", ip("203.0.113.1"), true).unwrap();
            t.outcome(a, false);
        }
        assert!(t.attempt("alice", ip("203.0.113.2"), true).is_err());
    }
}
