//! What a request may cost: the limits the web node enforces before it
//! stores anything — the JSON body size (in the app's `JsonConfig`), an
//! upload's declared size, and build creations per team per minute (a
//! token bucket per team: `n` at once, refilled at `n` a minute).

use std::time::{Duration, Instant};

use dashmap::DashMap;

use crate::web::error::ApiError;

/// The web node's request limits.
#[derive(Debug)]
pub struct Limits {
    /// Largest artifact accepted, in bytes (an upload declaring more is
    /// refused before it is read).
    pub max_artifact_bytes: u64,
    /// Build creations allowed per team per minute (0: no limit).
    pub builds_per_minute: u32,
    /// Each team's bucket.
    buckets: DashMap<String, Bucket>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Creations available now.
    tokens: f64,
    /// When `tokens` was last brought up to date.
    at: Instant,
}

impl Limits {
    /// Limits with the given figures.
    pub fn new(max_artifact_bytes: u64, builds_per_minute: u32) -> Self {
        Limits {
            max_artifact_bytes,
            builds_per_minute,
            buckets: DashMap::new(),
        }
    }

    /// Refuses an upload that declares more than the artifact limit.
    pub fn check_upload(&self, content_length: Option<u64>) -> Result<(), ApiError> {
        match content_length {
            Some(n) if n > self.max_artifact_bytes => Err(ApiError {
                status: actix_web::http::StatusCode::PAYLOAD_TOO_LARGE,
                message: format!(
                    "artifact too large: the upload of {n} bytes exceeds the limit of {} bytes (web.max_artifact_bytes)",
                    self.max_artifact_bytes
                ),
            }),
            _ => Ok(()),
        }
    }

    /// Takes one build creation of `team`'s allowance at `now`, or refuses
    /// with 429 saying when the next one is allowed.
    pub fn take_build(&self, team: &str, now: Instant) -> Result<(), ApiError> {
        let n = self.builds_per_minute;
        if n == 0 {
            return Ok(());
        }
        let per_sec = f64::from(n) / 60.0;
        let mut bucket = self.buckets.entry(team.to_string()).or_insert(Bucket {
            tokens: f64::from(n),
            at: now,
        });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * per_sec).min(f64::from(n));
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        let wait = Duration::from_secs_f64((1.0 - bucket.tokens) / per_sec);
        Err(ApiError {
            status: actix_web::http::StatusCode::TOO_MANY_REQUESTS,
            message: format!(
                "team {team} may create {n} builds a minute (web.builds_per_team_per_minute): try again in {:.1}s",
                wait.as_secs_f64()
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_team_gets_its_allowance_then_429_then_more_as_time_passes() {
        let limits = Limits::new(100, 3);
        let t0 = Instant::now();
        for _ in 0..3 {
            limits.take_build("red", t0).unwrap();
        }
        let refused = limits.take_build("red", t0).unwrap_err();
        assert_eq!(refused.status, 429);
        assert!(
            refused.message.contains("try again in 20.0s"),
            "{}",
            refused.message
        );
        // Another team has its own allowance.
        limits.take_build("blue", t0).unwrap();
        // One more every 20 s (3 a minute).
        assert!(limits
            .take_build("red", t0 + Duration::from_secs(19))
            .is_err());
        limits
            .take_build("red", t0 + Duration::from_secs(21))
            .unwrap();
        // No limit at 0.
        let open = Limits::new(100, 0);
        for _ in 0..1000 {
            open.take_build("red", t0).unwrap();
        }
    }

    #[test]
    fn uploads_declaring_more_than_the_limit_are_refused() {
        let limits = Limits::new(100, 0);
        assert!(limits.check_upload(Some(100)).is_ok());
        assert!(limits.check_upload(None).is_ok());
        assert_eq!(limits.check_upload(Some(101)).unwrap_err().status, 413);
    }
}
