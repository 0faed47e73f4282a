//! What a request may cost: the limits the web node enforces before it
//! stores anything — the JSON body size (in the app's `JsonConfig`), an
//! upload's declared size, and build creations per team per minute (a
//! token bucket per team in the database, shared by every web node:
//! `n` at once, refilled at `n` a minute).

use gantry_actors::Engine;

use crate::web::error::ApiError;

/// The web node's request limits.
#[derive(Debug)]
pub struct Limits {
    /// Largest artifact accepted, in bytes (an upload declaring more is
    /// refused before it is read).
    pub max_artifact_bytes: u64,
    /// Build creations allowed per team per minute (0: no limit).
    pub builds_per_minute: u32,
    /// How fast a request body must arrive.
    pub body_pace: crate::web::body_pace::BodyPace,
}

impl Limits {
    /// Limits with the given figures (and the default body pace).
    pub fn new(max_artifact_bytes: u64, builds_per_minute: u32) -> Self {
        Limits {
            max_artifact_bytes,
            builds_per_minute,
            body_pace: crate::web::body_pace::BodyPace {
                timeout: std::time::Duration::from_secs(30),
                min_bytes_per_sec: 1024,
            },
        }
    }

    /// The same limits with another body pace.
    pub fn with_body_pace(mut self, pace: crate::web::body_pace::BodyPace) -> Self {
        self.body_pace = pace;
        self
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

    /// Takes one build creation of `team`'s allowance, or refuses with 429
    /// saying when the next one is allowed.
    pub async fn take_build(&self, team: &str, engine: &Engine) -> Result<(), ApiError> {
        let n = self.builds_per_minute;
        match engine.take_team_build(team, n).await? {
            None => Ok(()),
            Some(wait) => Err(ApiError {
                status: actix_web::http::StatusCode::TOO_MANY_REQUESTS,
                message: format!(
                    "team {team} may create {n} builds a minute (web.builds_per_team_per_minute): try again in {:.1}s",
                    wait.as_secs_f64()
                ),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uploads_declaring_more_than_the_limit_are_refused() {
        let limits = Limits::new(100, 0);
        assert!(limits.check_upload(Some(100)).is_ok());
        assert!(limits.check_upload(None).is_ok());
        assert_eq!(limits.check_upload(Some(101)).unwrap_err().status, 413);
    }
}
