//! End to end, in headless Chromium: every page of the dashboard (the
//! overview, the sign-in page, a pipeline, a job, a resource, a build)
//! passes axe-core's automated accessibility check with no serious or
//! critical violation, in the dark and the light theme, at desktop and at
//! phone width. axe-core is the one `scripts/test.sh` installs from npm at
//! the version `tests/axe/package-lock.json` pins (`GANTRY_AXE_CORE`).

use crate::common;

use std::time::Duration;

use common::*;

use crate::dashboard_actions::PIPELINE;
use crate::dashboard_browser::cdp::Browser;
use crate::dashboard_browser::{chromium, text};

/// axe-core's script, or `None` (then the test is skipped, unless the
/// test script's `GANTRY_REQUIRE_RUNC` says everything must run).
fn axe_core() -> Option<String> {
    match std::env::var_os("GANTRY_AXE_CORE") {
        Some(path) => Some(
            std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("GANTRY_AXE_CORE {}: {e}", path.to_string_lossy())),
        ),
        None => {
            assert!(
                std::env::var_os("GANTRY_REQUIRE_RUNC").is_none(),
                "GANTRY_REQUIRE_RUNC is set, so this test may not be skipped: set GANTRY_AXE_CORE (scripts/test.sh does)"
            );
            eprintln!("skipped: needs GANTRY_AXE_CORE");
            None
        }
    }
}

/// The serious and critical violations axe finds on the page, one line
/// each (the rule, what it asks, where).
fn violations(browser: &mut Browser, axe: &str) -> Vec<String> {
    if text(browser, "typeof axe") != "object" {
        browser.eval(&format!("{axe};'loaded'"));
    }
    let found = browser.eval(
        "axe.run(document, {resultTypes: ['violations']}).then(r => r.violations\
         .filter(v => v.impact === 'serious' || v.impact === 'critical')\
         .map(v => `${v.id} (${v.impact}): ${v.help}: ` + v.nodes.slice(0, 3)\
           .map(n => n.target.join(' ') + ' ' + (n.failureSummary || '').replace(/\\s+/g, ' ')).join(' | ')))",
    );
    serde_json::from_value(found).unwrap()
}

#[test]
fn every_dashboard_page_passes_axe_with_no_serious_violation() {
    let Some(chromium) = chromium() else { return };
    let Some(axe) = axe_core() else { return };
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let server = quickstart_runc(dir.path(), &db);
    let url = server.url.as_str();
    let file = dir.path().join("p.yml");
    write(&file, PIPELINE);
    let ok = |args: &[&str]| {
        let out = client(url, args);
        assert!(out.status.success(), "{args:?}: {}", text_of(&out));
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    ok(&["set-pipeline", "-p", "p", "-c", file.to_str().unwrap()]);
    ok(&["unpause-pipeline", "-p", "p"]);
    ok(&["trigger-job", "-j", "p/j", "--watch"]);
    let build = common::pipelines::job_builds(url, "p", "j")[0]["id"]
        .as_i64()
        .unwrap();
    // Each page, and what shows it is drawn.
    let pages = [
        ("/".to_string(), "document.querySelector('#workers .card') && document.querySelector('#pipelines tr')"),
        ("/login".to_string(), "document.getElementById('username')"),
        ("/workers".to_string(), "document.querySelector('#workers .card')"),
        ("/queue".to_string(), "document.getElementById('queue').textContent.includes('No step waits')"),
        ("/collector".to_string(), "document.getElementById('gc').textContent.includes('rows by state')"),
        ("/teams/main/pipelines/p".to_string(), "document.querySelector('#pipeline-graph svg')"),
        ("/teams/main/pipelines/p/jobs/j".to_string(), "document.querySelector('#job-builds tr[data-build]')"),
        ("/teams/main/pipelines/p/resources/r".to_string(), "document.querySelector('#resource-versions tr[data-version]')"),
        (format!("/builds/{build}"), "document.getElementById('build-status').textContent === 'succeeded' && document.querySelector('#steps pre.log .ansi-32')"),
    ];
    let mut browser = Browser::launch(&chromium, dir.path());
    let mut found = vec![];
    for (scheme, width) in [("dark", None), ("light", None), ("light", Some(390))] {
        browser.call(
            "Emulation.setEmulatedMedia",
            serde_json::json!({"features": [{"name": "prefers-color-scheme", "value": scheme}]}),
        );
        match width {
            Some(w) => browser.call(
                "Emulation.setDeviceMetricsOverride",
                serde_json::json!({"width": w, "height": 844, "deviceScaleFactor": 1, "mobile": true}),
            ),
            None => browser.call("Emulation.clearDeviceMetricsOverride", serde_json::json!({})),
        };
        for (page, drawn) in &pages {
            browser.navigate(&format!("{url}{page}"));
            wait_for(&format!("{page} drawn"), Duration::from_secs(60), || {
                (browser.try_text(&format!("String(!!({drawn}))")).as_deref() == Some("true"))
                    .then_some(())
            });
            for v in violations(&mut browser, &axe) {
                found.push(format!(
                    "{page} ({scheme}, {}): {v}",
                    width.map_or("desktop".into(), |w| format!("{w}px"))
                ));
            }
        }
    }
    assert!(found.is_empty(), "axe found:\n{}", found.join("\n"));
}

fn text_of(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
