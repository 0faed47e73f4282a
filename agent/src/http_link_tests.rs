//! Tests of the beacon (`gantry-worker-common`'s) over the agent's HTTP
//! link: against fake web nodes, it registers again when forgotten, keeps
//! and presents its identity secret, and moves to the next web node.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use actix_web::{web, App, HttpResponse, HttpServer};
use gantry_wire::worker_info::{Heartbeat, WorkerLimits, WorkerRegistration};
use gantry_worker_common::beacon::{Beacon, IDENTITY_FILE};
use gantry_worker_common::holdings::Holdings;
use tokio::sync::watch;

use super::*;

/// A fake web node: counts registrations and heartbeats, and forgets the
/// worker at its first heartbeat.
#[derive(Default)]
struct FakeWeb {
    registrations: AtomicU32,
    heartbeats: AtomicU32,
    /// The identity secret each registration presented.
    presented: std::sync::Mutex<Vec<Option<String>>>,
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
                    |s: web::Data<FakeWeb>,
                     req: actix_web::HttpRequest,
                     r: web::Json<WorkerRegistration>| async move {
                        assert_eq!(r.name, "w1");
                        let secret = req
                            .headers()
                            .get(gantry_wire::worker_info::WORKER_SECRET_HEADER)
                            .map(|v| v.to_str().unwrap().to_string());
                        s.registrations.fetch_add(1, Ordering::SeqCst);
                        // A secret is issued at the first registration only.
                        let first = secret.as_deref() == Some("none");
                        s.presented.lock().unwrap().push(secret);
                        match first {
                            true => HttpResponse::Ok().json(
                                serde_json::json!({"state": "running", "worker_secret": "s3cret"}),
                            ),
                            false => {
                                HttpResponse::Ok().json(serde_json::json!({"state": "running"}))
                            }
                        }
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

/// Holdings of two containers and three volumes.
struct Fixed;

#[async_trait::async_trait]
impl Holdings for Fixed {
    async fn counts(&self) -> Result<(u32, u32), String> {
        Ok((2, 3))
    }
    async fn list(&self) -> Result<gantry_worker_common::holdings::Listing, String> {
        Ok(Default::default())
    }
    async fn destroy(
        &self,
        _: gantry_worker_common::holdings::Kind,
        _: &str,
    ) -> Result<(), String> {
        Ok(())
    }
}

fn beacon(web: &str) -> Beacon<HttpLink, Fixed> {
    let web = crate::web_nodes::WebNodes::parse(web).unwrap();
    let second = Some(Duration::from_secs(1));
    let link = HttpLink::new(web, "key", Duration::from_secs(30), second).unwrap();
    let registration = WorkerRegistration {
        name: "w1".into(),
        agent_url: "http://127.0.0.1:1".into(),
        agent_token: "t".into(),
        stream_key: String::new(),
        identity: Default::default(),
        resource_types: vec![],
        limits: WorkerLimits::default(),
        version: "0".into(),
        backend: "local".into(),
        incarnation: "i".into(),
        heartbeat_interval_secs: 1,
    };
    Beacon::new(link, Fixed, registration, Duration::from_millis(20))
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
async fn beacon_keeps_its_issued_identity_and_presents_it_after_a_restart() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(IDENTITY_FILE);
    let (url, web_state, handle) = fake_web(true);
    let (stop, stopped) = watch::channel(false);
    let b = beacon(&url).with_identity_file(file.clone()).unwrap();
    let task = tokio::spawn(b.run(stopped));
    // Forgotten at its first heartbeat, it registers again with its secret.
    heartbeats(&web_state, 3).await;
    stop.send(true).unwrap();
    task.await.unwrap();
    let presented = web_state.presented.lock().unwrap().clone();
    assert_eq!(
        presented,
        vec![Some("none".to_string()), Some("s3cret".to_string())]
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap().trim(), "s3cret");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    // A new process with the same work dir presents it at once.
    let (stop, stopped) = watch::channel(false);
    let b = beacon(&url).with_identity_file(file).unwrap();
    let task = tokio::spawn(b.run(stopped));
    heartbeats(&web_state, 4).await;
    stop.send(true).unwrap();
    task.await.unwrap();
    let presented = web_state.presented.lock().unwrap().clone();
    assert_eq!(presented[2], Some("s3cret".to_string()));
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
