//! The beacon: registers the worker with the web node and heartbeats.
//!
//! One small loop: register (retrying with exponential backoff, capped at
//! 10 s, until the web node answers: it may start after the worker), then
//! heartbeat every interval with the live counts. A heartbeat answered 404,
//! 409 or 410 means the web node no longer knows this incarnation: register
//! again at once, except 410: the worker was retired, and the beacon stops
//! for good. Every other failure is logged; none stops the loop. The state
//! the web node answers (a [`WorkerState`]: running, landing, landed, ...) is
//! published on [`Beacon::status`] as a [`BeaconStatus`], so a stopping
//! worker can wait until it has landed (or was retired). It ends when
//! shutdown is announced.

use std::sync::Arc;
use std::time::Duration;

use gantry_wire::worker_info::{Heartbeat, WorkerRegistration, WorkerState};
use reqwest::StatusCode;
use tokio::sync::watch;

/// First retry delay after a failure.
const BACKOFF_START: Duration = Duration::from_millis(250);
/// Longest retry delay.
const BACKOFF_CAP: Duration = Duration::from_secs(10);

/// Reports how many containers and volumes the worker holds.
pub type Counts = Arc<dyn Fn() -> (u32, u32) + Send + Sync>;

/// Where the worker stands with the web node, as the beacon last learned it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeaconStatus {
    /// Not registered yet: the web node has not answered.
    Unregistered,
    /// Registered; the lifecycle state the web node answered last.
    Registered(WorkerState),
    /// Retired: the web node answered a heartbeat with 410 Gone (the worker
    /// was deleted), and the beacon stopped.
    Retired,
}

/// Registration and heartbeats of one worker incarnation.
pub struct Beacon {
    /// HTTP client for the web node.
    pub http: reqwest::Client,
    /// The web nodes (any of them takes registrations and heartbeats).
    pub web: super::web_nodes::WebNodes,
    /// Key presented as bearer token.
    pub registration_key: String,
    /// What is registered (its incarnation is fixed for this run).
    pub registration: WorkerRegistration,
    /// Time between heartbeats.
    pub interval: Duration,
    /// The live counts sent with each heartbeat.
    pub counts: Counts,
    /// The worker's state as the web node last answered it
    /// ([`BeaconStatus::Retired`] after a 410).
    pub status: watch::Sender<BeaconStatus>,
}

/// What a failed call to the web node means.
#[derive(Debug)]
enum Failure {
    /// The web node does not know this worker (incarnation): register again.
    Unknown(StatusCode),
    /// The worker was retired: stop heartbeating.
    Retired,
    /// Anything else: retry after a backoff.
    Retry(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Unknown(status) => write!(f, "the web node answered {status}"),
            Failure::Retired => f.write_str("the worker was retired"),
            Failure::Retry(reason) => f.write_str(reason),
        }
    }
}

impl Beacon {
    /// Runs until `shutdown` becomes true.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        let register_path = "/api/v1/workers/register".to_string();
        let heartbeat_path = format!(
            "/api/v1/workers/{}/heartbeat",
            gantry_wire::url::segment(&self.registration.name)
        );
        let mut backoff = BACKOFF_START;
        let mut registered = false;
        loop {
            let wait = if !registered {
                match self.post(&register_path, &self.registration).await {
                    Ok(_) => {
                        self.status
                            .send_replace(BeaconStatus::Registered(WorkerState::Running));
                        tracing::info!(web = %self.web.current(), worker = %self.registration.name,
                            incarnation = %self.registration.incarnation, "registered with the web node");
                        registered = true;
                        backoff = BACKOFF_START;
                        self.interval
                    }
                    Err(f) => {
                        tracing::warn!(error = %f, retry_in = ?backoff, "registration failed");
                        next_backoff(&mut backoff)
                    }
                }
            } else {
                let (containers, volumes) = (self.counts)();
                let beat = Heartbeat {
                    incarnation: self.registration.incarnation.clone(),
                    containers,
                    volumes,
                };
                match self.post(&heartbeat_path, &beat).await {
                    Ok(state) => {
                        if let Some(state) = state {
                            self.status.send_replace(BeaconStatus::Registered(state));
                        }
                        backoff = BACKOFF_START;
                        self.interval
                    }
                    Err(Failure::Retired) => {
                        tracing::info!("the web node retired this worker; no more heartbeats");
                        self.status.send_replace(BeaconStatus::Retired);
                        return;
                    }
                    Err(Failure::Unknown(status)) => {
                        tracing::info!(%status, "the web node does not know this worker; registering again");
                        registered = false;
                        Duration::ZERO
                    }
                    Err(f) => {
                        tracing::warn!(error = %f, retry_in = ?backoff, "heartbeat failed");
                        next_backoff(&mut backoff)
                    }
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = shutdown.wait_for(|stop| *stop) => return,
            }
        }
    }

    /// POSTs JSON to `path` of a web node with the registration key;
    /// returns the `state` the web node answered, if it answered one this
    /// agent knows.
    async fn post<T: serde::Serialize>(
        &self,
        path: &str,
        body: &T,
    ) -> Result<Option<WorkerState>, Failure> {
        // A web node that hangs (rather than refuses) must not hold the
        // heartbeats back past the worker's TTL: after half an interval the
        // next node is asked.
        let timeout = (self.interval / 2).max(Duration::from_secs(1));
        let resp = self
            .web
            .send(|base| {
                self.http
                    .post(format!("{base}{path}"))
                    .bearer_auth(&self.registration_key)
                    .timeout(timeout)
                    .json(body)
            })
            .await
            .map_err(Failure::Retry)?;
        let url = resp.url().to_string();
        let status = resp.status();
        if status.is_success() {
            let answer: serde_json::Value = resp.json().await.unwrap_or_default();
            return Ok(answer["state"].as_str().and_then(WorkerState::parse));
        }
        if status == StatusCode::GONE {
            return Err(Failure::Retired);
        }
        if matches!(status, StatusCode::NOT_FOUND | StatusCode::CONFLICT) {
            return Err(Failure::Unknown(status));
        }
        let text = resp.text().await.unwrap_or_default();
        Err(Failure::Retry(format!(
            "{url} answered {status}: {}",
            text.trim()
        )))
    }
}

/// Returns the current delay and doubles it up to the cap.
fn next_backoff(backoff: &mut Duration) -> Duration {
    let now = *backoff;
    *backoff = (*backoff * 2).min(BACKOFF_CAP);
    now
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::{web, App, HttpResponse, HttpServer};
    use gantry_wire::worker_info::WorkerLimits;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn backoff_doubles_up_to_ten_seconds() {
        let mut b = BACKOFF_START;
        let delays: Vec<Duration> = (0..8).map(|_| next_backoff(&mut b)).collect();
        assert_eq!(delays[0], BACKOFF_START);
        assert_eq!(delays[1], BACKOFF_START * 2);
        assert_eq!(*delays.last().unwrap(), BACKOFF_CAP);
    }

    /// A fake web node: counts registrations and heartbeats, and forgets the
    /// worker at its first heartbeat.
    #[derive(Default)]
    struct FakeWeb {
        registrations: AtomicU32,
        heartbeats: AtomicU32,
    }

    /// Starts a fake web node; with `forget`, it answers the first
    /// heartbeat 404 (it does not know the worker).
    fn fake_web(forget: bool) -> (String, web::Data<FakeWeb>, actix_web::dev::ServerHandle) {
        let web_state = web::Data::new(FakeWeb::default());
        let data = web_state.clone();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .route(
                    "/api/v1/workers/register",
                    web::post().to(
                        |s: web::Data<FakeWeb>, r: web::Json<WorkerRegistration>| async move {
                            assert_eq!(r.name, "w1");
                            s.registrations.fetch_add(1, Ordering::SeqCst);
                            HttpResponse::Ok().finish()
                        },
                    ),
                )
                .route(
                    "/api/v1/workers/w1/heartbeat",
                    web::post().to(
                        move |s: web::Data<FakeWeb>, b: web::Json<Heartbeat>| async move {
                            assert_eq!((b.containers, b.volumes), (2, 3));
                            if s.heartbeats.fetch_add(1, Ordering::SeqCst) == 0 && forget {
                                HttpResponse::NotFound().finish()
                            } else {
                                HttpResponse::Ok().finish()
                            }
                        },
                    ),
                )
        })
        .workers(1)
        .disable_signals()
        .listen(listener)
        .unwrap()
        .run();
        let handle = server.handle();
        actix_rt::spawn(server);
        (format!("http://{addr}"), web_state, handle)
    }

    fn beacon(web: &str) -> Beacon {
        Beacon {
            http: reqwest::Client::new(),
            web: crate::web_nodes::WebNodes::parse(web).unwrap(),
            registration_key: "key".into(),
            registration: WorkerRegistration {
                name: "w1".into(),
                agent_url: "http://127.0.0.1:1".into(),
                agent_token: "t".into(),
                stream_key: String::new(),
                platform: "linux".into(),
                tags: vec![],
                team: None,
                resource_types: vec![],
                limits: WorkerLimits::default(),
                version: "0".into(),
                backend: "local".into(),
                incarnation: "i".into(),
                heartbeat_interval_secs: 1,
            },
            interval: Duration::from_millis(20),
            counts: Arc::new(|| (2, 3)),
            status: watch::channel(BeaconStatus::Unregistered).0,
        }
    }

    /// Waits until `n` heartbeats reached `web`.
    async fn heartbeats(web: &FakeWeb, n: u32) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while web.heartbeats.load(Ordering::SeqCst) < n {
            assert!(tokio::time::Instant::now() < deadline, "no heartbeats");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[actix_rt::test]
    async fn beacon_registers_again_when_the_web_node_forgets_it() {
        let (url, web_state, handle) = fake_web(true);
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(beacon(&url).run(stopped));
        heartbeats(&web_state, 3).await;
        assert_eq!(web_state.registrations.load(Ordering::SeqCst), 2);
        stop.send(true).unwrap();
        task.await.unwrap();
        handle.stop(false).await;
    }

    #[actix_rt::test]
    async fn beacon_moves_to_the_next_web_node_when_its_node_stops() {
        let (a_url, a, a_handle) = fake_web(false);
        let (b_url, b, b_handle) = fake_web(false);
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(beacon(&format!("{a_url},{b_url}")).run(stopped));
        heartbeats(&a, 2).await;
        assert_eq!(b.heartbeats.load(Ordering::SeqCst), 0);
        a_handle.stop(false).await;
        // The same registration goes on heartbeating, to the other node.
        heartbeats(&b, 3).await;
        assert_eq!(a.registrations.load(Ordering::SeqCst), 1);
        assert_eq!(b.registrations.load(Ordering::SeqCst), 0);
        stop.send(true).unwrap();
        task.await.unwrap();
        b_handle.stop(false).await;
    }
}
