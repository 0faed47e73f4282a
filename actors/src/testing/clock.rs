//! Test support for actors driven by time: an actix System whose tokio clock
//! starts paused, and a way to hold that clock still while the test waits on
//! something outside the runtime (sqlx's SQLite thread).
//!
//! A paused clock moves only when the runtime has nothing to do: it then
//! jumps to the next timer. That is what a test wants while it sleeps, and
//! what it must prevent while it waits for the database, or timers (the
//! ones under test, or the pool's acquire timeout) would fire early.

use std::future::Future;
use std::time::Duration;

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

/// Awaits `fut` with the clock held still: while a blocking task runs, tokio
/// does not auto-advance a paused clock (documented on `tokio::time::pause`),
/// so waiting on another thread fires no timer.
pub(crate) async fn held<F: Future>(fut: F) -> F::Output {
    let (release, released) = std::sync::mpsc::channel::<()>();
    let hold = tokio::task::spawn_blocking(move || {
        let _ = released.recv();
    });
    let out = fut.await;
    drop(release);
    hold.await.expect("the clock hold ends");
    out
}

/// Waits, clock held still, until `cond` holds (for effects that go through
/// another thread, such as a database write); panics naming `what` after
/// about two seconds of wall time.
pub(crate) async fn eventually(what: &str, mut cond: impl AsyncFnMut() -> bool) {
    for _ in 0..2000 {
        if held(cond()).await {
            return;
        }
        // A blocking task holds the clock still while it sleeps.
        tokio::task::spawn_blocking(|| std::thread::sleep(Duration::from_millis(1)))
            .await
            .expect("a pause");
    }
    panic!("timed out waiting for {what}");
}
