//! CPU-bound work (reading and translating a pipeline) off the caller's
//! event loop: on tokio's blocking pool, within a time budget. The web
//! node's request threads and the engine's actors never wait on it, so
//! `/healthz` and worker heartbeats are answered while a pipeline of
//! 10,000 jobs is read.

use std::time::{Duration, Instant};

use crate::error::EngineError;

/// How long reading, checking and translating one pipeline may take (a
/// pipeline of 10,000 jobs takes a few seconds at most).
pub(crate) const PIPELINE_BUDGET: Duration = Duration::from_secs(30);

/// When work started on its budget must be over.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    /// The instant the budget runs out.
    at: Instant,
    /// The budget, for the error.
    budget: Duration,
}

impl Deadline {
    /// A deadline `budget` from now.
    pub(crate) fn after(budget: Duration) -> Deadline {
        Deadline {
            at: Instant::now() + budget,
            budget,
        }
    }

    /// Refuses going on with `what` once the budget has run out: a long
    /// loop calls it now and then, so it stops soon after.
    pub(crate) fn check(&self, what: &str) -> Result<(), EngineError> {
        if Instant::now() > self.at {
            return Err(over_budget(what, self.budget));
        }
        Ok(())
    }
}

fn over_budget(what: &str, budget: Duration) -> EngineError {
    EngineError::Invalid(format!(
        "{what} took more than {budget:?} (its time budget): make it smaller"
    ))
}

/// Runs `f` (`what`, named in errors: `reading pipeline "ci"`) on a
/// blocking thread; answers its result, or an [`EngineError::Invalid`]
/// naming `budget` when it has not answered by then (`f` is given the
/// same deadline, to stop soon after).
pub(crate) async fn off_thread<T, F>(what: &str, budget: Duration, f: F) -> Result<T, EngineError>
where
    T: Send + 'static,
    F: FnOnce(Deadline) -> Result<T, EngineError> + Send + 'static,
{
    let deadline = Deadline::after(budget);
    let work = tokio::task::spawn_blocking(move || f(deadline));
    match tokio::time::timeout(budget, work).await {
        Ok(Ok(result)) => result,
        Ok(Err(e)) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Ok(Err(e)) => Err(EngineError::Unavailable(format!("{what}: {e}"))),
        Err(_) => Err(over_budget(what, budget)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn work_runs_off_the_caller_and_answers() {
        let caller = std::thread::current().id();
        let ran_on = off_thread("work", PIPELINE_BUDGET, |_| Ok(std::thread::current().id()))
            .await
            .unwrap();
        assert_ne!(ran_on, caller);
    }

    #[tokio::test]
    async fn work_past_its_budget_is_refused_naming_it() {
        let budget = Duration::from_millis(50);
        let e = off_thread(
            "reading pipeline \"p\"",
            budget,
            |deadline| -> Result<(), EngineError> {
                loop {
                    std::thread::sleep(Duration::from_millis(5));
                    deadline.check("reading pipeline \"p\"")?;
                }
            },
        )
        .await
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "reading pipeline \"p\" took more than 50ms (its time budget): make it smaller"
        );
        let d = Deadline::after(Duration::ZERO);
        std::thread::sleep(Duration::from_millis(1));
        assert!(d.check("x").is_err());
    }
}
