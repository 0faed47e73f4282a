//! Campaigning for a role (see [`crate::db::Lead`]) as a background job:
//! `leadership/{role}` tries to take the lead every interval and, leading,
//! checks that its connection still holds the lock. Jobs that must not
//! run twice are [`led_by`](super::Periodic::led_by) what it publishes.

use std::time::Duration;

use tokio::sync::watch;

use crate::db::{Db, Lead};
use gantry_jobs::{Backoff, Job, JobError, Jobs, Outcome, Periodic, Schedule};

/// Campaigns for `role` while a receiver lives: it reads `true` while this
/// node leads. On PostgreSQL a job `leadership/{role}` of `jobs` tries
/// (and, leading, checks its connection) every `every`, stopped in order
/// with the other jobs (the lead goes with it); on SQLite the one node
/// always leads, and no job runs. Must be called inside the actix System.
pub(crate) fn campaign(db: &Db, role: &str, every: Duration, jobs: &Jobs) -> watch::Receiver<bool> {
    if db.nodes().leads_alone() {
        return watch::channel(true).1;
    }
    let (leading, rx) = watch::channel(false);
    let job = Campaign {
        db: db.clone(),
        role: role.to_string(),
        lead: None,
        leading,
    };
    // A failed try is tried again at the same pace, as a lost lead is.
    let schedule = Schedule::every(every).with_backoff(Backoff::doubling(every, every));
    Periodic::new(job, schedule, jobs).start();
    rx
}

/// The campaign for one role.
struct Campaign {
    /// Where the lock is taken.
    db: Db,
    /// The role, named in the lock's key and the logs.
    role: String,
    /// The lead while this node holds it.
    lead: Option<Lead>,
    /// Whether this node leads, for the jobs it leads; closed when none is
    /// left to care, which ends the campaign.
    leading: watch::Sender<bool>,
}

impl Campaign {
    /// Gives the lead up, if held, and says so.
    async fn give_up(&mut self) {
        if let Some(lead) = self.lead.take() {
            self.leading.send_replace(false);
            tracing::info!(role = %self.role, "this web node no longer leads");
            lead.release().await;
        }
    }
}

impl Job for Campaign {
    fn name(&self) -> String {
        format!("leadership/{}", self.role)
    }

    async fn tick(&mut self) -> Result<Outcome, JobError> {
        if self.leading.is_closed() {
            self.give_up().await;
            return Ok(Outcome::Done);
        }
        if let Some(lead) = self.lead.as_mut() {
            if lead.holds().await {
                return Ok(Outcome::Idle);
            }
            self.give_up().await;
            return Err(JobError::Failed(format!(
                "lost the lead of {}: its connection failed",
                self.role
            )));
        }
        if let Some(lead) = self.db.nodes().try_lead(&self.role).await? {
            tracing::info!(role = %self.role, "this web node leads");
            self.lead = Some(lead);
            self.leading.send_replace(true);
        }
        Ok(Outcome::Idle)
    }
}

impl Drop for Campaign {
    fn drop(&mut self) {
        // Stopped while leading: the lock goes with the lead's connection,
        // and the jobs it led stand by.
        self.leading.send_replace(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gantry_jobs::JobState;

    /// Waits until `rx` reads `want`, at most 10 s.
    async fn reads(rx: &mut watch::Receiver<bool>, want: bool) {
        tokio::time::timeout(Duration::from_secs(10), rx.wait_for(|l| *l == want))
            .await
            .unwrap_or_else(|_| panic!("leading never became {want}"))
            .unwrap();
    }

    #[actix_rt::test]
    async fn one_node_leads_the_other_takes_over_when_its_job_stops() {
        let pg = crate::db::test_pg::PgDb::new().await;
        let every = Duration::from_millis(50);
        let (a_jobs, b_jobs) = (Jobs::default(), Jobs::default());
        let mut a = campaign(&pg.db, "gc-collector", every, &a_jobs);
        reads(&mut a, true).await;
        let mut b = campaign(&pg.db, "gc-collector", every, &b_jobs);
        tokio::time::sleep(every * 4).await;
        assert!(!*b.borrow(), "two nodes lead one role");
        let row = b_jobs.get("leadership/gc-collector").unwrap();
        assert!(row.runs >= 2 && row.errors == 0, "{row:?}");

        // The leader's jobs stop (its node shuts down): the lead goes with
        // its job, and the other node takes it at its next try.
        a_jobs.shutdown().await;
        assert!(!*a.borrow());
        assert_eq!(
            a_jobs.get("leadership/gc-collector").unwrap().state,
            JobState::Stopped
        );
        reads(&mut b, true).await;

        // No one left to lead for: the campaign ends.
        drop(b);
        tokio::time::timeout(Duration::from_secs(10), b_jobs.stopped())
            .await
            .expect("the campaign ends without receivers");
        pg.drop().await;
    }

    #[actix_rt::test]
    async fn on_sqlite_the_node_leads_without_a_job() {
        let (db, _dir) = crate::db::test_db().await;
        let jobs = Jobs::default();
        let rx = campaign(&db, "gc-collector", Duration::from_secs(1), &jobs);
        assert!(*rx.borrow());
        assert!(jobs.list().is_empty());
    }
}
