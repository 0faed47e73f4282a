//! `gantry bench ui` end to end, at a small size: the real binary runs a
//! build printing 20 MB (200,000 lines) on a runc worker, downloads its raw
//! log, and opens its page in headless Chromium. The page shows the log's
//! tail, jumps to its start and back to its end, and never holds more than
//! its window of the log (1 MiB, plus one read): the dashboard's log view
//! on a real browser, a real node and a real task's output.

use crate::common;
use crate::dashboard_browser::chromium;

#[test]
fn ui_bench_opens_a_huge_log_at_its_tail_and_jumps_with_a_bounded_page() {
    if !common::runc_runs_here() {
        return;
    }
    let Some(chromium) = chromium() else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let out = common::gantry()
        .env("TMPDIR", tmp.path())
        .args(["bench", "ui", "--lines", "200000", "--chromium"])
        .arg(&chromium)
        .output()
        .unwrap();
    let figures = common::Figures::of(&out);
    let stdout = &figures.stdout;
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(figures.get("download_identical"), Some("true"), "{stdout}");
    assert_eq!(figures.number("log_bytes"), 20_000_000.0, "{stdout}");
    for name in [
        "small_first_paint_ms",
        "first_paint_tail_ms",
        "first_paint_vs_small_ratio",
        "jump_start_ms",
        "jump_end_ms",
        "scroll_earlier_ms",
        "tab_js_heap_peak_mib",
        "tab_renderer_rss_peak_mib",
        "js_heap_vs_small_ratio",
        "renderer_rss_vs_small_ratio",
        "download_mb_s",
    ] {
        assert!(figures.number(name) > 0.0, "{name}: {stdout}");
    }
    // The page drew a window of the 20 MB, not all of it: 1 MiB and the
    // read that crossed it at most.
    let drawn = figures.number("log_chars_drawn_peak");
    assert!(drawn > 100_000.0 && drawn < 1_400_000.0, "{stdout}");
    // No container or mount left behind.
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "{stdout}"
    );
}
