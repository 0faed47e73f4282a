//! The pool that checks passwords: argon2id on purpose takes memory (19
//! MiB a check with the defaults) and CPU, and the sign-in route is open
//! to anyone, so the work is bounded before it starts. A fixed number of
//! threads each keep one block of argon2 memory for good (no allocation
//! per check, so a burst takes no more memory than the pool holds and
//! leaves the allocator nothing to keep); bounded queues wait before
//! them, and each client address may hold only a share of the pool. A
//! check past a bound is refused at once (503 with `Retry-After`) rather
//! than waiting.
//!
//! Checks of a configured user's name have a queue of their own, taken
//! first: names sprayed at random (checked against a hash no password
//! matches) cannot take the place of a real user's sign-in, and the
//! throttle bounds how many checks of one real name wait at once.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::{Arc, Condvar, Mutex};

use argon2::password_hash::{Output, PasswordHash};
use argon2::{Algorithm, Argon2, Block, Params, Version};

/// Why a check was not made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The pool and its queue are full.
    #[error("the node is checking as many passwords as it may: try again in a moment")]
    Full,
    /// This client address holds its share of the pool already.
    #[error("this address has as many sign-ins being checked as it may: try again in a moment")]
    ClientBusy,
}

/// One check waiting for a thread.
struct Job {
    /// The PHC string to check against (a configured user's, or a hash
    /// no password matches, for an unknown name).
    hash: Arc<str>,
    /// The password given.
    password: String,
    /// Where the answer goes (the caller may have gone: then it is lost).
    answer: tokio::sync::oneshot::Sender<bool>,
}

/// Which queue a check waits in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// A configured user's name: taken first.
    User,
    /// Any other name.
    Unknown,
}

/// The two queues before the threads.
#[derive(Default)]
struct Queues {
    /// Checks of configured users' names.
    users: VecDeque<Job>,
    /// Checks of other names.
    unknown: VecDeque<Job>,
    /// Set when the pool is dropped: the threads end.
    closed: bool,
}

/// What the threads and the callers share.
struct Shared {
    queues: Mutex<Queues>,
    /// Signalled when a check is queued (or the pool closes).
    queued: Condvar,
}

/// The password-checking pool of a web node.
pub struct PasswordChecks {
    shared: Arc<Shared>,
    /// How many checks each queue holds at most.
    queue: usize,
    /// Checks queued or running, by client address.
    per_client: dashmap::DashMap<IpAddr, u32>,
    /// How many one address may hold at once.
    per_client_max: u32,
}

impl Drop for PasswordChecks {
    fn drop(&mut self) {
        if let Ok(mut q) = self.shared.queues.lock() {
            q.closed = true;
        }
        self.shared.queued.notify_all();
    }
}

impl std::fmt::Debug for PasswordChecks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PasswordChecks")
            .field("queue", &self.queue)
            .field("per_client_max", &self.per_client_max)
            .finish()
    }
}

/// A check held for a client address: released when dropped, however the
/// check ends (answered, or its caller gone).
struct ClientSlot<'a> {
    pool: &'a PasswordChecks,
    client: IpAddr,
}

impl Drop for ClientSlot<'_> {
    fn drop(&mut self) {
        self.pool.per_client.remove_if_mut(&self.client, |_, held| {
            *held -= 1;
            *held == 0
        });
    }
}

impl PasswordChecks {
    /// A pool of `threads` threads, each holding `memory_kib` KiB of
    /// argon2 memory (the largest `m` cost it will be asked to check),
    /// with `queue` checks waiting at most in each lane. One client
    /// address may hold a quarter of the threads and a lane's queue
    /// together (at least one).
    pub fn start(threads: usize, queue: usize, memory_kib: u32) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            queues: Mutex::new(Queues::default()),
            queued: Condvar::new(),
        });
        for i in 0..threads.max(1) {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("password-check-{i}"))
                .spawn(move || {
                    // Taken at the first check, kept for the thread's life.
                    let mut memory = Vec::new();
                    while let Some(job) = next_job(&shared) {
                        if memory.is_empty() {
                            memory = vec![Block::default(); memory_kib as usize];
                        }
                        let good = verify(&job.hash, &job.password, &mut memory);
                        let _ = job.answer.send(good);
                    }
                })?;
        }
        let capacity = u32::try_from(threads.max(1) + queue).unwrap_or(u32::MAX);
        Ok(Self {
            shared,
            queue,
            per_client: Default::default(),
            per_client_max: (capacity / 4).max(1),
        })
    }

    /// Whether `password` matches `hash`, checked on the pool for
    /// `client` in `lane`; refused at once when the lane's queue or the
    /// client's share of the pool is full.
    pub async fn check(
        &self,
        client: IpAddr,
        lane: Lane,
        hash: Arc<str>,
        password: String,
    ) -> Result<bool, Refused> {
        let _slot = self.hold(client)?;
        let (answer, answered) = tokio::sync::oneshot::channel();
        {
            let mut q = self.shared.queues.lock().unwrap_or_else(|e| e.into_inner());
            let waiting = match lane {
                Lane::User => &mut q.users,
                Lane::Unknown => &mut q.unknown,
            };
            if waiting.len() >= self.queue.max(1) {
                return Err(Refused::Full);
            }
            waiting.push_back(Job {
                hash,
                password,
                answer,
            });
        }
        self.shared.queued.notify_one();
        // A thread that died (it cannot, short of a panic in argon2)
        // dropped the sender: no match.
        Ok(answered.await.unwrap_or(false))
    }

    /// Takes one of `client`'s share, if it has one left.
    fn hold(&self, client: IpAddr) -> Result<ClientSlot<'_>, Refused> {
        let mut held = self.per_client.entry(client).or_insert(0);
        if *held >= self.per_client_max {
            return Err(Refused::ClientBusy);
        }
        *held += 1;
        drop(held);
        Ok(ClientSlot { pool: self, client })
    }
}

/// The next check for a thread: a configured user's first; `None` once
/// the pool is closed.
fn next_job(shared: &Shared) -> Option<Job> {
    let mut q = shared.queues.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        if q.closed {
            return None;
        }
        if let Some(job) = q.users.pop_front().or_else(|| q.unknown.pop_front()) {
            return Some(job);
        }
        q = shared.queued.wait(q).unwrap_or_else(|e| e.into_inner());
    }
}

/// How many KiB of memory checking `hash` (a PHC string) takes: its `m`
/// cost (argon2's block count, rounded as argon2 rounds it).
pub fn memory_of(hash: &str) -> Option<u32> {
    let parsed = PasswordHash::new(hash).ok()?;
    let params = Params::try_from(&parsed).ok()?;
    u32::try_from(params.block_count()).ok()
}

/// Whether `password` matches the argon2 PHC string `hash`, computed in
/// `memory` (at least the hash's `m` cost in blocks; less: no match).
fn verify(hash: &str, password: &str, memory: &mut [Block]) -> bool {
    let Ok(parsed) = PasswordHash::new(hash) else {
        return false;
    };
    let (Ok(algorithm), Ok(params), Some(salt), Some(expected)) = (
        Algorithm::try_from(parsed.algorithm),
        Params::try_from(&parsed),
        parsed.salt,
        parsed.hash,
    ) else {
        return false;
    };
    let Ok(version) = Version::try_from(parsed.version.unwrap_or(0x13)) else {
        return false;
    };
    let mut salt_bytes = [0u8; 64];
    let Ok(salt) = salt.decode_b64(&mut salt_bytes) else {
        return false;
    };
    let mut out = vec![0u8; expected.len()];
    if Argon2::new(algorithm, version, params)
        .hash_password_into_with_memory(password.as_bytes(), salt, &mut out, memory)
        .is_err()
    {
        return false;
    }
    // Output's equality is constant-time.
    Output::new(&out).is_ok_and(|got| got == expected)
}

#[cfg(test)]
mod tests {
    use super::*;
    use argon2::password_hash::PasswordVerifier as _;

    #[tokio::test]
    async fn the_pool_agrees_with_argon2_and_refuses_past_its_bounds() {
        let hash = crate::web::people::hash_password("right").unwrap();
        let memory = memory_of(&hash).unwrap();
        assert_eq!(memory, 19 * 1024);
        // What the pool computes is argon2's verdict.
        let mut blocks = vec![Block::default(); memory as usize];
        assert!(verify(&hash, "right", &mut blocks));
        assert!(!verify(&hash, "wrong", &mut blocks));
        let parsed = PasswordHash::new(&hash).unwrap();
        assert!(Argon2::default().verify_password(b"right", &parsed).is_ok());
        // Too little memory: no match, no panic.
        assert!(!verify(&hash, "right", &mut blocks[..8]));

        let pool = PasswordChecks::start(1, 3, memory).unwrap();
        let me: IpAddr = "192.0.2.1".parse().unwrap();
        let hash: Arc<str> = Arc::from(hash.as_str());
        let check = |lane, password: &str| pool.check(me, lane, hash.clone(), password.into());
        assert_eq!(check(Lane::User, "right").await, Ok(true));
        assert_eq!(check(Lane::Unknown, "right").await, Ok(true));
        assert_eq!(check(Lane::User, "nope").await, Ok(false));
        // One address holds at most a quarter of 1 thread + 3 queued.
        let first = check(Lane::Unknown, "a");
        let second = check(Lane::User, "b");
        let (a, b) = tokio::join!(first, second);
        assert!(
            matches!((a, b), (Ok(false), Err(Refused::ClientBusy))),
            "{a:?} {b:?}"
        );
        assert!(pool.per_client.is_empty(), "slots are given back");
    }

    #[test]
    fn a_configured_users_check_is_taken_before_unknown_names() {
        let shared = Shared {
            queues: Mutex::new(Queues::default()),
            queued: Condvar::new(),
        };
        let job = |hash: &str| Job {
            hash: Arc::from(hash),
            password: String::new(),
            answer: tokio::sync::oneshot::channel().0,
        };
        {
            let mut q = shared.queues.lock().unwrap();
            q.unknown.push_back(job("sprayed"));
            q.users.push_back(job("alice"));
        }
        assert_eq!(&*next_job(&shared).unwrap().hash, "alice");
        assert_eq!(&*next_job(&shared).unwrap().hash, "sprayed");
        shared.queues.lock().unwrap().closed = true;
        assert!(next_job(&shared).is_none());
    }
}
