//! A PostgreSQL `LISTEN` as a background job: what several web nodes tell
//! each other through the database (a placement released, a build's event
//! stored) arrives as it is sent, not at the next poll.
//!
//! A tick connects (and says so: anything may have been sent while nothing
//! listened), or waits up to [`LISTEN_WAIT`] for the next notifications and
//! hands each to the job's handler; either way the next tick follows at
//! once, so every notification is handled as it arrives, and a shutdown is
//! held back at most [`LISTEN_WAIT`].

use std::time::Duration;

use crate::error::EngineError;
use gantry_jobs::{Backoff, Job, JobError, Jobs, Outcome, Periodic, Schedule};

/// The longest one tick waits for a notification.
const LISTEN_WAIT: Duration = Duration::from_secs(1);

/// What a listener hands its handler.
pub(crate) enum Heard<'a> {
    /// It (re)connected: whatever was sent before may have been missed.
    Connected,
    /// A notification's payload.
    Notice(&'a str),
}

/// Listens on `channel` of the PostgreSQL database at `url` as job `name`,
/// handing what it hears to `handle`, until `handle` answers false. It
/// reconnects a second after a failure, every time.
pub(crate) fn listen<F>(jobs: &Jobs, name: &str, url: &str, channel: &'static str, handle: F)
where
    F: FnMut(Heard<'_>) -> bool + Unpin + 'static,
{
    let job = Listener {
        name: name.to_string(),
        url: url.to_string(),
        channel,
        listener: None,
        handle,
    };
    let again = Duration::from_secs(1);
    let schedule = Schedule::every(again).with_backoff(Backoff::doubling(again, again));
    Periodic::new(job, schedule, jobs).start();
}

/// The job behind [`listen`].
struct Listener<F> {
    name: String,
    url: String,
    channel: &'static str,
    /// The listening connection, once connected.
    listener: Option<sqlx::postgres::PgListener>,
    handle: F,
}

impl<F> Drop for Listener<F> {
    fn drop(&mut self) {
        // A listener's drop spawns a task to close its connection: with no
        // runtime left (the System ended without `Engine::shutdown`) it
        // would panic, so the connection is left to the process's end.
        if tokio::runtime::Handle::try_current().is_err() {
            std::mem::forget(self.listener.take());
        }
    }
}

impl<F> Job for Listener<F>
where
    F: FnMut(Heard<'_>) -> bool + Unpin + 'static,
{
    fn name(&self) -> String {
        self.name.clone()
    }

    async fn tick(&mut self) -> Result<Outcome, JobError> {
        let Some(listener) = self.listener.as_mut() else {
            let mut listener = sqlx::postgres::PgListener::connect(&self.url)
                .await
                .map_err(EngineError::from)?;
            listener
                .listen(self.channel)
                .await
                .map_err(EngineError::from)?;
            self.listener = Some(listener);
            return Ok(match (self.handle)(Heard::Connected) {
                true => Outcome::Busy,
                false => Outcome::Done,
            });
        };
        // `recv` is cancel-safe: a timeout loses no notification.
        let heard = match tokio::time::timeout(LISTEN_WAIT, listener.recv()).await {
            Err(_) => return Ok(Outcome::Busy),
            Ok(Ok(notice)) => notice,
            Ok(Err(e)) => {
                self.listener = None;
                return Err(JobError::Failed(format!(
                    "listening on {}: {e}",
                    self.channel
                )));
            }
        };
        let mut go_on = (self.handle)(Heard::Notice(heard.payload()));
        // Whatever else has arrived meanwhile, without waiting.
        while go_on {
            let Some(notice) = listener.next_buffered() else {
                break;
            };
            go_on = (self.handle)(Heard::Notice(notice.payload()));
        }
        Ok(if go_on { Outcome::Busy } else { Outcome::Done })
    }
}
