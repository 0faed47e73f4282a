//! The live feed of a stored pipeline's pages:
//! `GET /api/v1/teams/{team}/pipelines/{pipeline}/feed` (the pipeline's
//! page: the pipeline, its jobs and resources), `?job=NAME` (a job's page:
//! the job and its newest builds with their inputs) or `?resource=NAME` (a
//! resource's page: the resource and its newest versions). Server-sent
//! events: each message's data is `{"now": UNIX_MS, "page": SNAPSHOT}`,
//! sent at once and then whenever the snapshot changed; an `event:
//! problem` says why none could be taken (the pipeline was destroyed, the
//! database failed).
//!
//! One publisher per page, not per tab: the first follower of a page starts
//! a task that takes the page's snapshot once every [`TICK`] and hands it to
//! every follower through a watch channel; the task ends at the first tick
//! with no follower left, or when the node stops (it is one of the web
//! node's tasks, [`crate::web::AppState::tasks`]: it leaves the map, its
//! channel closes and every follower's stream ends, so the open feeds do
//! not hold the HTTP server's stop). So the database's work grows with the number of
//! pages open, not with the number of tabs showing them
//! (`gantry_dashboard_page_snapshots_total` counts the snapshots taken).
//! A finished build's inputs never change: a publisher reads them once.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::{web, HttpResponse};
use gantry_actors::api::{now_ms, Build, BuildResources};
use gantry_actors::Engine;
use serde::Deserialize;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::feed::Changes;
use crate::web::api::public_pipelines::{read_pipeline, Part, Reader};
use crate::web::auth::Identity;
use crate::web::error::ApiError;
use crate::web::AppState;

/// How often a publisher takes its page's snapshot.
pub const TICK: Duration = Duration::from_secs(1);

/// How many builds a job's page and how many versions a resource's page
/// list (the newest).
const NEWEST: i64 = 50;

/// Which page of a pipeline a feed serves.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Page {
    /// The pipeline's graph.
    Pipeline,
    /// A job's builds.
    Job(String),
    /// A resource's versions.
    Resource(String),
}

/// A page of a team's pipeline, as its reader sees it (the team, or the
/// public of an exposed pipeline: one publisher each).
type Key = (String, String, Page, Reader);

/// What a publisher last took: a snapshot as JSON, or why none could be.
#[derive(Debug, Clone, PartialEq)]
enum Frame {
    Snapshot(Arc<str>),
    Problem(String),
}

/// The publishers of the pages open now.
#[derive(Default)]
pub struct PageFeeds {
    by_page: Mutex<HashMap<Key, Arc<watch::Sender<Frame>>>>,
    /// Snapshots taken since the node started.
    taken: AtomicU64,
}

impl PageFeeds {
    /// Follows `key`'s page: its publisher's channel, started on `tasks`
    /// (with a first snapshot taken now, so a missing pipeline is an HTTP
    /// error) when the page has none.
    async fn follow(
        self: &Arc<Self>,
        engine: &Engine,
        tasks: &gantry_jobs::Tasks,
        key: Key,
    ) -> Result<watch::Receiver<Frame>, ApiError> {
        if let Some(sender) = self.lock().get(&key) {
            return Ok(sender.subscribe());
        }
        let mut inputs = HashMap::new();
        let first = self.take(engine, &key, &mut inputs).await?;
        let mut map = self.lock();
        if let Some(sender) = map.get(&key) {
            // Another follower started it meanwhile.
            return Ok(sender.subscribe());
        }
        let (sender, receiver) = watch::channel(Frame::Snapshot(first));
        let sender = Arc::new(sender);
        map.insert(key.clone(), sender.clone());
        drop(map);
        let feeds = self.clone();
        let engine = engine.clone();
        tasks.spawn_local_graceful(move |stop| async move {
            feeds.publish(&engine, key, &sender, inputs, stop).await;
        });
        Ok(receiver)
    }

    /// Takes `key`'s snapshot every [`TICK`] and hands it to the page's
    /// followers through `sender`, until the first tick with no follower
    /// left or until `stop` (the node stops): then the page leaves the map,
    /// so the channel closes once `sender` is dropped.
    async fn publish(
        &self,
        engine: &Engine,
        key: Key,
        sender: &watch::Sender<Frame>,
        mut inputs: HashMap<i64, BuildResources>,
        stop: CancellationToken,
    ) {
        let mut tick = tokio::time::interval(TICK);
        tick.tick().await;
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                () = stop.cancelled() => {
                    self.lock().remove(&key);
                    return;
                }
            }
            {
                // Under the map's lock, as a new follower subscribes.
                let mut map = self.lock();
                if sender.receiver_count() == 0 {
                    map.remove(&key);
                    return;
                }
            }
            let frame = match self.take(engine, &key, &mut inputs).await {
                Ok(json) => Frame::Snapshot(json),
                Err(e) => Frame::Problem(e.message),
            };
            sender.send_if_modified(|last| {
                let changed = *last != frame;
                if changed {
                    *last = frame;
                }
                changed
            });
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Arc<watch::Sender<Frame>>>> {
        self.by_page.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The snapshot of `key`'s page now, as JSON; `inputs` keeps the
    /// inputs of finished builds read before.
    async fn take(
        &self,
        engine: &Engine,
        (team, pipeline, page, reader): &Key,
        inputs: &mut HashMap<i64, BuildResources>,
    ) -> Result<Arc<str>, ApiError> {
        self.taken.fetch_add(1, Ordering::Relaxed);
        if let Reader::Public(was) = reader {
            // Hidden since (or its job or resource no longer public): the
            // public's publisher stops showing it.
            let (job, resource) = match page {
                Page::Pipeline => (None, None),
                Page::Job(j) => (Some(j.as_str()), None),
                Page::Resource(r) => (None, Some(r.as_str())),
            };
            if engine.publicity(team, pipeline, job, resource).await? != Some(*was) {
                return Err(ApiError::not_found(format!(
                    "pipeline {pipeline} is no longer exposed as it was: sign in, or open it again"
                )));
            }
        }
        let snapshot = match page {
            Page::Pipeline => {
                // One after the other: a publisher holds at most one of the
                // database pool's connections (SQLite's pool is small).
                let mut p = engine.pipeline(team, pipeline).await?;
                let jobs = reader.jobs(engine.pipeline_jobs(team, pipeline).await?);
                let resources = engine.pipeline_resources(team, pipeline).await?;
                let resources: Vec<_> = resources.into_iter().map(|r| reader.resource(r)).collect();
                // The page draws no config (it can be large).
                p.config = None;
                serde_json::json!({"pipeline": p, "jobs": jobs, "resources": resources})
            }
            Page::Job(job) => {
                let j = reader.job(engine.pipeline_job(team, pipeline, job).await?);
                let builds = engine.job_builds(team, pipeline, job, None, NEWEST).await?;
                let builds: Vec<_> = builds.into_iter().map(|b| reader.build(b)).collect();
                let mut used = BTreeMap::new();
                for b in &builds {
                    if let Some(i) = build_inputs(engine, b, inputs).await? {
                        used.insert(b.id.to_string(), i);
                    }
                }
                inputs.retain(|id, _| builds.iter().any(|b| b.id == *id));
                serde_json::json!({"job": j, "builds": builds, "inputs": used})
            }
            Page::Resource(resource) => {
                let all = engine.pipeline_resources(team, pipeline).await?;
                let Some(r) = all
                    .into_iter()
                    .find(|r| r.name == *resource && !r.resource_type)
                else {
                    return Err(ApiError::not_found(format!(
                        "resource {resource} not found in pipeline {pipeline}"
                    )));
                };
                let versions = engine
                    .resource_versions(team, pipeline, resource, None, NEWEST)
                    .await?;
                let versions = reader.versions(versions);
                serde_json::json!({"resource": reader.resource(r), "versions": versions})
            }
        };
        Ok(serde_json::to_string(&snapshot)
            .expect("snapshots serialise")
            .into())
    }

    /// Snapshots taken since the node started.
    pub fn taken(&self) -> u64 {
        self.taken.load(Ordering::Relaxed)
    }
}

/// The versions `build` was given: read once it is finished (then kept
/// in `known`), each time while it runs, none while it waits.
async fn build_inputs(
    engine: &Engine,
    build: &Build,
    known: &mut HashMap<i64, BuildResources>,
) -> Result<Option<serde_json::Value>, ApiError> {
    if let Some(r) = known.get(&build.id) {
        return Ok(Some(
            serde_json::to_value(&r.inputs).expect("versions serialise"),
        ));
    }
    if build.status == gantry_wire::state::BuildStatus::Pending {
        return Ok(None);
    }
    let r = engine.build_resources(build.id).await?;
    let value = serde_json::to_value(&r.inputs).expect("versions serialise");
    if build.status.is_finished() {
        known.insert(build.id, r);
    }
    Ok(Some(value))
}

/// Query of the feed: which page (none: the pipeline's).
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct FeedQuery {
    /// A job's page.
    job: Option<String>,
    /// A resource's page.
    resource: Option<String>,
    /// The token, for a browser's EventSource that cannot set a header.
    #[allow(dead_code)]
    token: Option<String>,
}

/// `GET /api/v1/teams/{team}/pipelines/{pipeline}/feed`: a pipeline page's
/// live feed (see the module's docs).
#[utoipa::path(
    get,
    path = "/api/v1/teams/{team}/pipelines/{pipeline}/feed",
    operation_id = "pipelineFeed",
    tag = "pipelines",
    params(("team" = String, Path), ("pipeline" = String, Path), FeedQuery),
    responses(
        (status = 200, description = "Server-sent events: the page's snapshot (`pipeline`, `jobs`, `resources`; with `job`: `job`, `builds`, `inputs` by build id; with `resource`: `resource`, `versions`) at once and on every change", content_type = "text/event-stream", body = String),
        (status = 400, description = "Both job and resource given, or an unknown parameter", body = crate::web::error::ErrorBody),
        (status = 404, description = "No such pipeline, job or resource (or another team's)", body = crate::web::error::ErrorBody),
    )
)]
pub async fn feed(
    identity: Identity,
    state: web::Data<AppState>,
    path: web::Path<(String, String)>,
    query: web::Query<FeedQuery>,
) -> Result<HttpResponse, ApiError> {
    let (team, pipeline) = path.into_inner();
    let FeedQuery { job, resource, .. } = query.into_inner();
    if job.is_some() && resource.is_some() {
        return Err(ApiError::bad_request(
            "give job or resource, not both: a feed serves one page",
        ));
    }
    let part = Part {
        job: job.as_deref(),
        resource: resource.as_deref(),
    };
    let reader = read_pipeline(&identity, &state, &team, &pipeline, part).await?;
    let page = match (job, resource) {
        (Some(job), _) => Page::Job(job),
        (None, Some(resource)) => Page::Resource(resource),
        (None, None) => Page::Pipeline,
    };
    let mut receiver = state
        .page_feeds
        .follow(&state.engine, &state.tasks, (team, pipeline, page, reader))
        .await?;
    receiver.mark_changed();
    let follower = Follower {
        receiver,
        changes: Changes::default(),
        keep_alive: tokio::time::interval(super::feed::KEEP_ALIVE),
        first: true,
    };
    Ok(super::feed::event_stream(follower.into_stream()))
}

/// One tab's side of a page's feed.
struct Follower {
    receiver: watch::Receiver<Frame>,
    changes: Changes,
    keep_alive: tokio::time::Interval,
    first: bool,
}

impl Follower {
    fn into_stream(self) -> impl futures::Stream<Item = std::io::Result<bytes::Bytes>> {
        futures::stream::unfold(self, |mut f| async move {
            loop {
                let changed = tokio::select! {
                    changed = f.receiver.changed() => changed.is_ok(),
                    _ = f.keep_alive.tick() => {
                        match f.changes.keep_alive(Instant::now()) {
                            Some(k) => return Some((Ok(bytes::Bytes::from(k)), f)),
                            None => continue,
                        }
                    }
                };
                if !changed {
                    // The publisher ended (the node is stopping: see `publish`).
                    return None;
                }
                let frame = f.receiver.borrow_and_update().clone();
                let now = Instant::now();
                let text = match frame {
                    Frame::Snapshot(json) => f.changes.frame_json_as("page", &json, now, now_ms()),
                    Frame::Problem(message) => f.changes.problem(&message, now),
                };
                if let Some(mut text) = text {
                    if std::mem::take(&mut f.first) {
                        // Reconnect soon after the web node went away.
                        text.insert_str(0, "retry: 2000\n");
                    }
                    return Some((Ok(bytes::Bytes::from(text)), f));
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_is_sent_once_per_change() {
        let mut changes = Changes::default();
        let now = Instant::now();
        let first = changes.frame_json_as("page", "{\"a\":1}", now, 5);
        assert_eq!(
            first.as_deref(),
            Some("data: {\"now\":5,\"page\":{\"a\":1}}\n\n")
        );
        assert_eq!(changes.frame_json_as("page", "{\"a\":1}", now, 6), None);
        assert!(changes.frame_json_as("page", "{\"a\":2}", now, 7).is_some());
    }
}
