//! `gantry bench ui`: a build's page over a huge log, in a real headless
//! Chromium driven over the DevTools protocol ([`super::cdp`]).
//!
//! Set-up ([`super::rig`]): a real web node (SQLite) and one runc worker
//! in this process. Two builds of a stored pipeline run to their end: the
//! baseline prints one line (`small`), the other `--lines` lines of 100
//! bytes (`huge`: 2,000,000 lines make 200 MB) with busybox `awk`.
//!
//! Figures, each from one run:
//! - `download_identical`: the raw log (`GET /api/v1/builds/{id}/log`,
//!   what the page's "raw log" link fetches) hashes as what the task
//!   printed (the same lines made here); `download_mb_s` its speed;
//! - `first_paint_tail_ms`: from asking the browser to open the huge
//!   build's page to its last line being in the page's log, against
//!   `small_first_paint_ms`, the same for the one-line build (ratio
//!   printed);
//! - `jump_start_ms` and `jump_end_ms`: clicking the log's "start" (then
//!   "end") until its first (last) line shows; `scroll_earlier_ms`: from
//!   scrolling to the top of the window drawn until the line before it
//!   shows;
//! - `tab_js_heap_peak_mib` (`Performance.getMetrics`' `JSHeapTotalSize`)
//!   and `tab_renderer_rss_peak_mib` (the resident memory of the page's
//!   renderer process), the peaks over the tail, the start and the end
//!   again, against the one-line page's (`small_*`, ratios printed);
//!   `log_chars_drawn_peak`: the most characters of the log in the page.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use gantry_actors::api::Vars;
use gantry_actors::Engine;
use serde_json::json;
use sha2::{Digest as _, Sha256};

use super::cdp::Browser;
use super::rig::Rig;

/// Options of the benchmark.
pub struct UiBench {
    /// Lines the huge build prints (100 bytes each).
    pub lines: u64,
    /// The Chromium binary (default: `chromium` on the PATH).
    pub chromium: Option<PathBuf>,
}

/// The team the builds belong to.
const TEAM: &str = "main";
/// How long the page may take to show what is waited for.
const PAGE_DEADLINE: Duration = Duration::from_secs(120);

/// A job printing `lines` numbered lines of 100 bytes, and one printing
/// one line.
fn pipeline(lines: u64) -> String {
    format!(
        r#"jobs:
- name: huge
  plan:
  - task: print
    config:
      platform: linux
      run:
        path: awk
        args: ['BEGIN {{ for (i = 1; i <= {lines}; i++) printf "line %09d %084d\n", i, i }}']
- name: small
  plan:
  - task: print
    config:
      platform: linux
      run: {{path: echo, args: [small-done]}}
"#
    )
}

/// Line `i` as the task prints it.
fn line(i: u64) -> String {
    format!("line {i:09} {i:084}\n")
}

/// Runs the benchmark and prints its figures. Must be called inside an
/// actix System.
pub async fn bench(opts: UiBench) -> anyhow::Result<()> {
    let runc = super::rig::require_runc("ui")?;
    if opts.lines == 0 {
        bail!("--lines must be at least 1");
    }
    let chromium = match &opts.chromium {
        Some(path) => path.clone(),
        None => gantry_agent::find_executable("chromium")
            .context("the ui benchmark drives Chromium: install `chromium` or give --chromium")?,
    };
    let mut rig = Rig::start(runc, "bench-ui", 1).await?;
    let result = measure(&rig, &opts, chromium).await;
    rig.stop().await;
    result
}

async fn measure(rig: &Rig, opts: &UiBench, chromium: PathBuf) -> anyhow::Result<()> {
    let engine = &rig.engine;
    let config = pipeline(opts.lines);
    let small = run_build(engine, &config, "small").await?;
    let started = Instant::now();
    let huge = run_build(engine, &config, "huge").await?;
    let build_s = started.elapsed().as_secs_f64();

    // What the task printed, and what the raw log link downloads.
    let mut expected = Sha256::new();
    for i in 1..=opts.lines {
        expected.update(line(i).as_bytes());
    }
    let expected = expected.finalize();
    let base = format!("http://{}", rig.addr);
    let started = Instant::now();
    let mut answer = reqwest::get(format!("{base}/api/v1/builds/{huge}/log"))
        .await
        .and_then(reqwest::Response::error_for_status)
        .context("downloading the raw log")?;
    let mut got = Sha256::new();
    let mut downloaded = 0u64;
    while let Some(chunk) = answer.chunk().await.context("downloading the raw log")? {
        downloaded += chunk.len() as u64;
        got.update(&chunk);
    }
    let download_s = started.elapsed().as_secs_f64();
    let identical = got.finalize() == expected;

    let last = format!("line {:09} ", opts.lines);
    let profile_dir = rig.base.clone();
    let browsed = tokio::task::spawn_blocking(move || {
        std::panic::catch_unwind(|| browse(&chromium, &profile_dir, &base, small, huge, &last))
    })
    .await
    .context("the browser thread")?
    .map_err(|panic| {
        let said = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        anyhow::anyhow!("driving Chromium failed: {said}")
    })??;

    let mib = |b: f64| b / (1024.0 * 1024.0);
    println!("lines: {}", opts.lines);
    println!("log_bytes: {downloaded}");
    println!("build_s: {build_s:.1}");
    println!("download_identical: {identical}");
    println!(
        "download_mb_s: {:.1}",
        mib(downloaded as f64) / download_s.max(1e-9)
    );
    println!("small_first_paint_ms: {:.0}", browsed.small.paint_ms);
    println!("first_paint_tail_ms: {:.0}", browsed.tail_ms);
    println!(
        "first_paint_vs_small_ratio: {:.2}",
        browsed.tail_ms / browsed.small.paint_ms.max(1.0)
    );
    println!("jump_start_ms: {:.0}", browsed.start_ms);
    println!("jump_end_ms: {:.0}", browsed.end_ms);
    println!("scroll_earlier_ms: {:.0}", browsed.earlier_ms);
    println!("small_js_heap_mib: {:.1}", mib(browsed.small.heap));
    println!("tab_js_heap_peak_mib: {:.1}", mib(browsed.heap_peak));
    println!(
        "js_heap_vs_small_ratio: {:.2}",
        browsed.heap_peak / browsed.small.heap.max(1.0)
    );
    println!("small_renderer_rss_mib: {:.1}", mib(browsed.small.rss));
    println!("tab_renderer_rss_peak_mib: {:.1}", mib(browsed.rss_peak));
    println!(
        "renderer_rss_vs_small_ratio: {:.2}",
        browsed.rss_peak / browsed.small.rss.max(1.0)
    );
    println!("log_chars_drawn_peak: {}", browsed.chars_peak);
    if !identical {
        bail!("the raw log downloaded is not what the task printed ({downloaded} bytes)");
    }
    Ok(())
}

/// Runs job `job` to its end; answers the build, which must succeed.
async fn run_build(engine: &Engine, config: &str, job: &str) -> anyhow::Result<i64> {
    let id = engine
        .create_job_build(TEAM, "bench-ui", config, job, Vars::new(), "bench")
        .await
        .with_context(|| format!("submitting a build of {job}"))?;
    let mut events = engine.follow_build_events(id, 0);
    while let Some(event) = events.recv().await {
        event.with_context(|| format!("following build {id}"))?;
    }
    let row = engine.build(id).await?;
    if row.status != gantry_wire::state::BuildStatus::Succeeded {
        bail!("build {id} of {job} ended {}", row.status.as_str());
    }
    Ok(id)
}

/// What the one-line page measured.
struct Small {
    paint_ms: f64,
    heap: f64,
    rss: f64,
}

/// What the browser measured.
struct Browsed {
    small: Small,
    tail_ms: f64,
    start_ms: f64,
    end_ms: f64,
    earlier_ms: f64,
    heap_peak: f64,
    rss_peak: f64,
    chars_peak: u64,
}

/// The page's log text holds `text` (a JavaScript test).
fn log_shows(text: &str) -> String {
    format!(
        "[...document.querySelectorAll('#steps pre.log')].some((p) => p.textContent.includes({}))",
        json!(text)
    )
}

/// Drives Chromium over the two builds' pages (blocking; panics on a
/// protocol failure, which the caller reports).
fn browse(
    chromium: &Path,
    dir: &Path,
    base: &str,
    small: i64,
    huge: i64,
    last: &str,
) -> anyhow::Result<Browsed> {
    let mut browser = Browser::launch(chromium, dir);
    browser.call("Performance.enable", json!({}));
    let small_ms = open_until(
        &mut browser,
        &format!("{base}/builds/{small}"),
        &log_shows("small-done"),
    )?;
    let (small_heap, _) = metrics(&mut browser);
    let small = Small {
        paint_ms: small_ms,
        heap: small_heap,
        rss: renderer_rss(browser.pid()),
    };

    let tail_ms = open_until(
        &mut browser,
        &format!("{base}/builds/{huge}"),
        &log_shows(last),
    )?;
    let mut heap_peak = 0f64;
    let mut rss_peak = 0f64;
    let mut chars_peak = 0u64;
    let mut sample = |browser: &mut Browser| {
        let (heap, _) = metrics(browser);
        heap_peak = heap_peak.max(heap);
        rss_peak = rss_peak.max(renderer_rss(browser.pid()));
        let chars = browser
            .try_text("[...document.querySelectorAll('#steps pre.log')].reduce((n, p) => n + p.textContent.length, 0)")
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0);
        chars_peak = chars_peak.max(chars);
    };
    sample(&mut browser);
    let jump = |browser: &mut Browser, to: &str, shows: &str| {
        let started = Instant::now();
        browser.eval(&format!(
            "document.querySelector('[data-log-jump={to}]').click(); true"
        ));
        wait_for(browser, &log_shows(shows)).map(|()| started.elapsed().as_secs_f64() * 1000.0)
    };
    let start_ms = jump(&mut browser, "start", "line 000000001 ")?;
    sample(&mut browser);
    let end_ms = jump(&mut browser, "end", last)?;
    sample(&mut browser);
    // Scrolled to the window's top, the lines before it are read.
    let first: u64 = browser
        .try_text("document.querySelector('#steps pre.log').textContent.slice(5, 14)")
        .and_then(|s| s.parse().ok())
        .context("the first line drawn")?;
    let started = Instant::now();
    browser.eval("const p = document.querySelector('#steps pre.log'); p.scrollTop = 0; p.dispatchEvent(new Event('scroll')); true");
    wait_for(
        &mut browser,
        &log_shows(&format!("line {:09} ", first.saturating_sub(1).max(1))),
    )?;
    let earlier_ms = started.elapsed().as_secs_f64() * 1000.0;
    sample(&mut browser);
    Ok(Browsed {
        earlier_ms,
        small,
        tail_ms,
        start_ms,
        end_ms,
        heap_peak,
        rss_peak,
        chars_peak,
    })
}

/// Asks the page to open `url`; answers the milliseconds until `until`
/// (a JavaScript test) holds.
fn open_until(browser: &mut Browser, url: &str, until: &str) -> anyhow::Result<f64> {
    let started = Instant::now();
    browser.call("Page.navigate", json!({ "url": url }));
    wait_for(browser, until)?;
    Ok(started.elapsed().as_secs_f64() * 1000.0)
}

/// Waits until `test` (a JavaScript expression) is true on the page.
fn wait_for(browser: &mut Browser, test: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + PAGE_DEADLINE;
    loop {
        if browser.try_text(test).as_deref() == Some("true") {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the page did not show what was awaited within {PAGE_DEADLINE:?}: {test}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `JSHeapTotalSize` and `Nodes` of the page (`Performance.getMetrics`).
fn metrics(browser: &mut Browser) -> (f64, f64) {
    let r = browser.call("Performance.getMetrics", json!({}));
    let of = |name: &str| {
        r["metrics"]
            .as_array()
            .and_then(|all| all.iter().find(|m| m["name"] == name))
            .and_then(|m| m["value"].as_f64())
            .unwrap_or(0.0)
    };
    (of("JSHeapTotalSize"), of("Nodes"))
}

/// The resident bytes of the biggest renderer process under `browser`
/// (the page's: one page is open).
fn renderer_rss(browser: u32) -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    let parent_of = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let after = stat.rsplit_once(')')?.1;
        after.split_whitespace().nth(1)?.parse().ok()
    };
    let mut biggest = 0f64;
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmdline).contains("--type=renderer") {
            continue;
        }
        let mut up = Some(pid);
        let mut ours = false;
        for _ in 0..8 {
            up = up.and_then(parent_of);
            if up == Some(browser) {
                ours = true;
                break;
            }
        }
        if !ours {
            continue;
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let rss_kib = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .unwrap_or(0.0);
        biggest = biggest.max(rss_kib * 1024.0);
    }
    biggest
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_line_is_a_hundred_bytes() {
        assert_eq!(line(1).len(), 100);
        assert_eq!(line(2_000_000).len(), 100);
        assert!(line(7).starts_with("line 000000007 0000"));
    }
}
