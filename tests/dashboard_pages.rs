//! End to end, in headless Chromium: the fleet's pages of their own. A
//! step that no worker can take waits (`wait_for_workers_secs`), and
//! `/queue` shows it by the tag it needs, with only the queue's panel on
//! the page; a worker with that tag registers and takes it, and the queue
//! empties on the page without a reload. `/workers` shows the worker and
//! `/collector` the garbage collector's panels, each marked in the page's
//! navigation. Eight tabs on one pipeline page all load and follow it live
//! (a browser opens at most six connections to a host: the tabs share one
//! stream through the dashboard's shared worker).

use crate::common;

use std::time::Duration;

use common::*;

use crate::dashboard_browser::cdp::Browser;
use crate::dashboard_browser::{chromium, text};

/// The ids of the overview's panels shown on the page.
fn shown_panels(browser: &mut Browser) -> String {
    text(
        browser,
        "[...document.querySelectorAll('#overview [data-pages]')].filter(p => !p.hidden).map(p => p.querySelector('h2').firstChild.textContent.trim()).join(',')",
    )
}

#[test]
fn the_workers_queue_and_collector_have_pages_of_their_own_fed_live() {
    let Some(chromium) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(dir, &db, "[web.placement]\nwait_for_workers_secs = 300\n");
    let url = web.url.as_str();
    let task = dir.join("gpu.yml");
    write(
        &task,
        "platform: linux\nrun: {path: sh, args: [-c, 'echo on-the-gpu-worker']}\n",
    );
    let mut waiting = spawn_execute(
        url,
        dir,
        "gpu",
        &["-c", task.to_str().unwrap(), "--tag", "gpu"],
    );

    let mut browser = Browser::launch(&chromium, dir);
    browser.navigate(&format!("{url}/queue"));
    let row = wait_for(
        "the step queued for tag gpu",
        Duration::from_secs(60),
        || {
            let row = text(
                &mut browser,
                "document.querySelector('#queue tr[data-queue]')?.textContent ?? ''",
            );
            row.contains("gpu").then_some(row)
        },
    );
    assert!(row.contains("main") && row.contains("linux"), "{row}");
    assert_eq!(
        text(
            &mut browser,
            "document.getElementById('queue-count').textContent"
        ),
        "1"
    );
    assert_eq!(shown_panels(&mut browser), "Queue");
    assert_eq!(
        text(
            &mut browser,
            "document.querySelector('#pages [aria-current=page]').textContent"
        ),
        "queue"
    );
    assert_eq!(text(&mut browser, "document.title"), "Gantry · queue");

    // A worker with the tag takes the step: the queue empties, live.
    let _worker = common::workers::start_worker(
        dir,
        url,
        "gpu-worker",
        &[worker_backend(), &["--tag", "gpu"]].concat(),
    );
    wait_for("the queue to empty", Duration::from_secs(120), || {
        text(&mut browser, "document.getElementById('queue').textContent")
            .contains("No step waits")
            .then_some(())
    });
    let status = wait_child(&mut waiting, Duration::from_secs(120));
    let out = std::fs::read_to_string(dir.join("gpu.out")).unwrap_or_default();
    assert!(status.success(), "{out}");

    // The workers' page: the worker, and only the workers' panel.
    browser.navigate(&format!("{url}/workers"));
    wait_for("the worker on its page", Duration::from_secs(60), || {
        (text(
            &mut browser,
            "document.querySelector('[data-worker]')?.dataset.worker ?? ''",
        ) == "gpu-worker")
            .then_some(())
    });
    assert_eq!(shown_panels(&mut browser), "Workers");

    // The collector's page: its rows and rules, and the handles.
    browser.navigate(&format!("{url}/collector"));
    wait_for("the collector's panel", Duration::from_secs(60), || {
        text(&mut browser, "document.getElementById('gc').textContent")
            .contains("rows by state")
            .then_some(())
    });
    assert_eq!(
        shown_panels(&mut browser),
        "Garbage collection,Containers and volumes"
    );
}

#[test]
fn eight_tabs_on_a_pipeline_page_share_one_stream_and_all_follow_it() {
    let Some(chromium) = chromium() else { return };
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let db = TestDb::new(DbKind::Sqlite);
    let web = start_web(dir, &db, "");
    let url = web.url.as_str();
    write(&dir.join("p.yml"), crate::dashboard_actions::PIPELINE);
    let out = client(
        url,
        &[
            "set-pipeline",
            "-p",
            "p",
            "-c",
            dir.join("p.yml").to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = format!("{url}/teams/main/pipelines/p");
    let mut browser = Browser::launch(&chromium, dir);
    let paused = "document.getElementById('pipeline-status').textContent";
    for tab in 0..8 {
        if tab > 0 {
            browser.open_tab();
        }
        browser.navigate(&page);
        wait_for(
            &format!("tab {tab} live and drawn"),
            Duration::from_secs(60),
            || {
                let live = text(&mut browser, "document.getElementById('live').textContent");
                let drawn = text(&mut browser, paused);
                (live == "live" && drawn.contains("paused")).then_some(())
            },
        );
    }
    // A change reaches every tab, without a reload.
    let out = client(url, &["unpause-pipeline", "-p", "p"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for tab in 0..8 {
        browser.use_tab(tab);
        wait_for(
            &format!("tab {tab} to show the pipeline unpaused"),
            Duration::from_secs(60),
            || (!text(&mut browser, paused).contains("paused")).then_some(()),
        );
    }
}
