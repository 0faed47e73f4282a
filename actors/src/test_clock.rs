//! Test support for actors driven by time: an actix System whose tokio clock
//! starts paused, and a way to hold that clock still while the test waits on
//! something outside the runtime (sqlx's SQLite thread).
//!
//! A paused clock moves only when the runtime has nothing to do: it then
//! jumps to the next timer. That is what a test wants while it sleeps, and
//! what it must prevent while it waits for the database, or timers (the
//! ones under test, or the pool's acquire timeout) would fire early.

use std::future::Future;

/// Runs `test` in an actix System (a current-thread tokio runtime) whose
/// clock starts paused, so every instant is on the timer's millisecond grid
/// and `sleep` moves from timer to timer in order, in no wall time.
pub(crate) fn run_paused<F: Future<Output = ()>>(test: impl FnOnce() -> F) {
    actix::System::with_tokio_rt(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("a current-thread runtime")
    })
    .block_on(test());
}
