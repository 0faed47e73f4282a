//! End to end: pipelines of Concourse's own testflight suite
//! (`tests/fixtures/concourse-testflight/`, copied unchanged) run with
//! `gantry run` on a quickstart with runc: `mock` resources with
//! `mirror_self` images, custom resource types, `load_var`, `across`, hooks,
//! `attempts`, `timeout`, `try`, `image:` and the put inputs. Each job ends
//! as Concourse's testflight expects (some end failed on purpose: a task
//! left to be hijacked) and prints what its test looks for.

use crate::common;

use std::path::Path;

use common::*;

/// One job run: file, job, exit code, then texts expected on stdout and on
/// stderr, and texts that must not be on stdout or stderr.
struct Case {
    file: &'static str,
    job: &'static str,
    exit: i32,
    stdout: &'static [&'static str],
    stderr: &'static [&'static str],
    not_stdout: &'static [&'static str],
    not_stderr: &'static [&'static str],
}

const fn case(file: &'static str, job: &'static str, exit: i32) -> Case {
    Case {
        file,
        job,
        exit,
        stdout: &[],
        stderr: &[],
        not_stdout: &[],
        not_stderr: &[],
    }
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            // Concourse's `testflight/across_test.go`: `across` over a
            // list `load_var` loaded prints every value. A loaded list is
            // not a secret, even without `reveal: true` (Concourse's
            // tracker redacts strings and the strings inside mappings,
            // `vars/tracker.go`), so its values are shown in the copies'
            // names and output as Concourse shows them.
            stdout: &[
                "running across static1 dynamic1",
                "running across static1 dynamic2",
                "running across static1 dynamic3",
                "running across static1 4",
                "running across static2 dynamic1",
                "running across static2 dynamic2",
                "running across static2 dynamic3",
                "running across static2 4",
            ],
            not_stdout: &["((redacted))"],
            stderr: &[
                "step mock[dynamic=dynamic1]: put mock {\"version\":\"v_dynamic1\"}",
                "step mock[dynamic=dynamic3]: put mock {\"version\":\"v_dynamic3\"}",
                "step mock[dynamic=4]: put mock {\"version\":\"v_4\"}",
            ],
            not_stderr: &["((redacted))"],
            ..case("across.yml", "job", 0)
        },
        Case {
            stdout: &["running do step 1\nrunning do step 2\nrunning do step 3\n"],
            ..case("do.yml", "do-job", 0)
        },
        Case {
            stdout: &[
                "passing job on success",
                "passing job ensure",
                "passing job on job success",
                "passing job on job ensure",
            ],
            ..case("hooks.yml", "some-passing-job", 0)
        },
        Case {
            stdout: &[
                "failing job on failure",
                "failing job ensure",
                "failing job on job failure",
            ],
            ..case("hooks.yml", "some-failing-job", 1)
        },
        // `run.path: error` does not exist: the task errors (it never ran),
        // so on_error and ensure run, on_failure does not, and the build
        // errors (exit 2, as fly's).
        Case {
            stdout: &[
                "errored job on error",
                "errored job ensure",
                "errored job on job error",
                "errored job on job ensure",
            ],
            stderr: &[
                "run.path \"error\" could not be started: executable file not found in $PATH",
            ],
            not_stdout: &[
                "errored job on failure",
                "errored job on success",
                "errored job on job failure",
                "errored job on job success",
            ],
            ..case("hooks.yml", "some-errored-job", 2)
        },
        Case {
            stderr: &["step use-vars: succeeded"],
            ..case("load-var-step.yml", "use-var", 0)
        },
        Case {
            stderr: &["step some-resource: streamed specified-input"],
            not_stderr: &["step some-resource: streamed all-input"],
            ..case("put-inputs.yml", "job-using-specified-inputs", 1)
        },
        Case {
            stderr: &[
                "step some-resource: streamed specified-input",
                "step some-resource: streamed all-input",
            ],
            ..case("put-inputs.yml", "job-using-all-inputs", 1)
        },
        Case {
            stderr: &["step some-resource: put some-resource"],
            not_stderr: &["step some-resource: streamed "],
            ..case("put-inputs.yml", "job-using-empty-inputs", 1)
        },
        Case {
            stderr: &["step some-resource: streamed specified-input"],
            not_stderr: &["step some-resource: streamed all-input"],
            ..case("put-inputs.yml", "job-using-detect-inputs-simple", 1)
        },
        Case {
            stdout: &["fetched version: testflight-hash"],
            ..case("resource-types.yml", "resource-getter", 0)
        },
        Case {
            stderr: &["step my-resource: put my-resource {\"version\":\"some-pushed-version\"}"],
            ..case("resource-types.yml", "resource-putter", 0)
        },
        // The image's metadata.json env reaches the task: its version.
        Case {
            stdout: &["MIRRORED_VERSION=image-version"],
            ..case("resource-types.yml", "resource-image-resourcer", 0)
        },
        Case {
            stdout: &["MIRRORED_VERSION=testflight-hash"],
            ..case("resource-types.yml", "resource-imager", 0)
        },
        Case {
            stdout: &["attempts: 3; success!"],
            ..case("retry.yml", "retry-job", 0)
        },
        Case {
            stdout: &["passing-task succeeded"],
            ..case("timeout.yml", "duration-successful-job", 0)
        },
        Case {
            stderr: &["step timeout-task: timedout"],
            ..case("timeout.yml", "duration-fail-job", 1)
        },
        Case {
            stdout: &["duration fail job on failure", "duration fail job ensure"],
            ..case("timeout_hooks.yml", "duration-fail-job", 1)
        },
        Case {
            stdout: &["passing-task succeeded"],
            ..case("try.yml", "try-job", 0)
        },
    ]
}

fn run_case(url: &str, dir: &Path, c: &Case) -> Result<(), String> {
    let file = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/concourse-testflight")
        .join(c.file);
    let out = gantry()
        .current_dir(dir)
        .args(["--url", url, "run", "-p"])
        .arg(&file)
        .args(["-j", c.job, "-v", "hash=testflight-hash"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let what = format!("{} {}", c.file, c.job);
    let fail = |why: String| {
        Err(format!(
            "{what}: {why}\n--- stdout\n{stdout}\n--- stderr\n{stderr}"
        ))
    };
    if out.status.code() != Some(c.exit) {
        return fail(format!("exit {:?}, expected {}", out.status.code(), c.exit));
    }
    if let Some(t) = c.stdout.iter().find(|t| !stdout.contains(**t)) {
        return fail(format!("no {t:?} on stdout"));
    }
    if let Some(t) = c.stderr.iter().find(|t| !stderr.contains(**t)) {
        return fail(format!("no {t:?} on stderr"));
    }
    if let Some(t) = c.not_stdout.iter().find(|t| stdout.contains(**t)) {
        return fail(format!("{t:?} on stdout"));
    }
    if let Some(t) = c.not_stderr.iter().find(|t| stderr.contains(**t)) {
        return fail(format!("{t:?} on stderr"));
    }
    Ok(())
}

#[test]
fn testflight_pipelines_run_unchanged() {
    if !runc_runs_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::new(DbKind::Sqlite);
    let server = quickstart(dir.path(), &db, &["--backend", "runc"]);
    // Three runs at a time: each mostly waits on its containers, and the
    // fleet runs builds side by side as it would for a team.
    let queue = std::sync::Mutex::new(cases().into_iter());
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| loop {
                let Some(c) = queue.lock().unwrap().next() else {
                    return;
                };
                if let Err(e) = run_case(&server.url, dir.path(), &c) {
                    failures.lock().unwrap().push(e);
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
