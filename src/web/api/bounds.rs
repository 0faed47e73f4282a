//! The bounds of what a request may hold, beyond the body size: names,
//! descriptions, tags and times. Each is refused with a 400 naming the
//! field and its limit (the README lists them).

use crate::web::error::ApiError;

/// The longest description (of a token).
pub const MAX_DESCRIPTION: usize = 256;

/// The longest name (a pipeline, job, resource, input or tag): the
/// engine's bound on the names a pipeline config gives, so that every
/// name a config sets can be named in a path.
pub const MAX_NAME: usize = gantry_actors::api::MAX_NAME;

/// The longest reference (an image, an artifact id).
pub const MAX_REFERENCE: usize = 2048;

/// The most tags, inputs or vars one build may carry.
pub const MAX_ITEMS: usize = 256;

/// The longest build timeout a request may set: 7 days, in seconds.
pub const MAX_TIMEOUT_SECS: u64 = 7 * 24 * 3600;

/// Refuses `value` (field `what`) when it is longer than `max` bytes or
/// holds control characters (the rule of [`gantry_wire::worker_info::check_text`]).
pub fn check_text(what: &str, value: &str, max: usize) -> Result<(), ApiError> {
    gantry_wire::worker_info::check_text(what, value, max, true).map_err(ApiError::bad_request)
}

/// Refuses a list (field `what`) of more than [`MAX_ITEMS`] items.
pub fn check_count(what: &str, count: usize) -> Result<(), ApiError> {
    if count > MAX_ITEMS {
        return Err(ApiError::bad_request(format!(
            "{what}: {count} given, the limit is {MAX_ITEMS}"
        )));
    }
    Ok(())
}

/// Refuses a timeout outside 1 second to [`MAX_TIMEOUT_SECS`].
pub fn check_timeout(what: &str, secs: u64) -> Result<(), ApiError> {
    if !(1..=MAX_TIMEOUT_SECS).contains(&secs) {
        return Err(ApiError::bad_request(format!(
            "{what} {secs}: give 1 to {MAX_TIMEOUT_SECS} seconds (7 days)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_counts_and_timeouts_have_limits() {
        assert!(check_text("d", "ok", 2).is_ok());
        assert!(check_text("d", "long", 2).is_err());
        assert!(check_text("d", "a\u{0}", 10).is_err());
        assert!(check_count("tags", MAX_ITEMS).is_ok());
        assert!(check_count("tags", MAX_ITEMS + 1).is_err());
        assert!(check_timeout("timeout_secs", 60).is_ok());
        assert!(check_timeout("timeout_secs", 0).is_err());
        let e = check_timeout("timeout_secs", u64::MAX).unwrap_err();
        assert!(e.message.contains("timeout_secs"), "{}", e.message);
    }
}
