//! End to end: many open dashboard feeds cost the database what one does.
//! Feeds of one viewer share one snapshot a second, so the web node's
//! statements a second (`gantry_db_queries_total`) stay those of one feed
//! when 50 are open.

use crate::common;

use std::io::Read as _;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

const ADMIN: &str = "adm1n";

/// Opens a feed on a thread of its own, reading it until `stop`; counts the
/// snapshots it receives in `frames`.
fn open_feed(
    url: &str,
    stop: Arc<AtomicBool>,
    frames: Arc<AtomicUsize>,
) -> std::thread::JoinHandle<()> {
    let url = format!("{url}/api/v1/dashboard/events?token={ADMIN}");
    std::thread::spawn(move || {
        let client = reqwest::blocking::Client::builder()
            .timeout(None)
            .build()
            .unwrap();
        let mut resp = client.get(url).send().unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        let mut buf = [0u8; 65536];
        while !stop.load(Ordering::Relaxed) {
            match resp.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let text = String::from_utf8_lossy(&buf[..n]);
                    frames.fetch_add(text.matches("data: ").count(), Ordering::Relaxed);
                }
            }
        }
    })
}

/// The node's statements and snapshots over `window`.
fn measure(url: &str, window: Duration) -> (f64, f64) {
    let (q0, s0) = (
        metric(url, "gantry_db_queries_total"),
        metric(url, "gantry_dashboard_snapshots_total"),
    );
    std::thread::sleep(window);
    let (q1, s1) = (
        metric(url, "gantry_db_queries_total"),
        metric(url, "gantry_dashboard_snapshots_total"),
    );
    (q1 - q0, s1 - s0)
}

#[test]
fn fifty_open_feeds_cost_the_database_what_one_does() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(
        dir.path(),
        &db,
        &format!("[web]\nadmin_token = \"{ADMIN}\"\n"),
    );
    let _w = start_worker(dir.path(), &web.url, "w", worker_backend());
    wait_for("the worker", Duration::from_secs(60), || {
        (metric(&web.url, "gantry_workers{state=\"running\"}") == 1.0).then_some(())
    });
    let stop = Arc::new(AtomicBool::new(false));
    let frames = Arc::new(AtomicUsize::new(0));
    let window = Duration::from_secs(5);

    let mut feeds = vec![open_feed(&web.url, stop.clone(), frames.clone())];
    wait_for("the first frame", Duration::from_secs(10), || {
        (frames.load(Ordering::Relaxed) >= 1).then_some(())
    });
    let (one_queries, one_snapshots) = measure(&web.url, window);

    for _ in 1..50 {
        feeds.push(open_feed(&web.url, stop.clone(), frames.clone()));
    }
    let start = Instant::now();
    wait_for("a frame on every feed", Duration::from_secs(30), || {
        (frames.load(Ordering::Relaxed) >= 50).then_some(())
    });
    println!(
        "50 feeds got their first frame within {:?}",
        start.elapsed()
    );
    let (fifty_queries, fifty_snapshots) = measure(&web.url, window);
    stop.store(true, Ordering::Relaxed);

    println!(
        "over {window:?}: one feed {one_queries} statements, {one_snapshots} snapshots; \
         50 feeds {fifty_queries} statements, {fifty_snapshots} snapshots"
    );
    // One snapshot a second for the one viewer, however many feeds.
    assert!(one_snapshots <= 7.0, "{one_snapshots}");
    assert!(fifty_snapshots <= 7.0, "{fifty_snapshots}");
    // The statements stay those of one feed, within a constant (the
    // worker's heartbeats and sweeps and the Collector vary a little).
    assert!(
        fifty_queries <= one_queries * 1.3 + 50.0,
        "50 feeds: {fifty_queries} statements against {one_queries} for one"
    );
    drop(feeds);
}
