//! Helpers of the stored pipeline tests: the API read as JSON, a job's
//! builds and the versions they used, waiting for a build of a commit.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::git::{bare_repo_of, git, GitDaemon};
use super::{text, wait_for, write};

/// A git repository a pipeline's `git` resource follows: a bare
/// `repo.git` with one commit of `msg` = `seed`, served by `git daemon`,
/// and the work tree it came from, pushing to it.
pub struct GitRepo {
    /// The work tree.
    pub work: std::path::PathBuf,
    /// The first commit.
    pub seed: String,
    /// `uri=git://...`, the `-v` flag of the pipelines' `((uri))`.
    pub uri_var: String,
    _daemon: GitDaemon,
}

impl GitRepo {
    /// The repository, under `dir`.
    pub fn new(dir: &Path) -> GitRepo {
        let bare = bare_repo_of(dir, "repo", &[("msg", b"seed")]);
        let work = dir.join("repo-seed");
        git(&work, &["remote", "add", "origin", bare.to_str().unwrap()]);
        let seed = git(&work, &["rev-parse", "HEAD"]);
        let daemon = GitDaemon::serve(dir);
        GitRepo {
            uri_var: format!("uri={}", daemon.uri("repo.git")),
            work,
            seed,
            _daemon: daemon,
        }
    }

    /// Commits `msg` (as the file `msg`) and pushes it; answers the commit.
    pub fn push(&self, msg: &str) -> String {
        let c = commit(&self.work, msg);
        git(&self.work, &["push", "-q", "origin", "main"]);
        c
    }
}

/// GET `path` of the node at `url` as JSON.
pub fn api(url: &str, path: &str) -> Value {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
        .get(format!("{url}{path}"))
        .send()
        .and_then(|r| r.error_for_status())
        .and_then(|r| r.json())
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

/// The builds of job `job` of pipeline `p`, oldest first.
pub fn job_builds(url: &str, p: &str, job: &str) -> Vec<Value> {
    let mut builds = api(
        url,
        &format!("/api/v1/teams/main/pipelines/{p}/jobs/{job}/builds?limit=500"),
    )
    .as_array()
    .unwrap()
    .clone();
    builds.reverse();
    builds
}

/// Which version of which input a test follows: a git `repo`'s `ref`, or
/// a mock's `version`.
#[derive(Clone, Copy)]
pub struct Input {
    /// The get step's name.
    pub name: &'static str,
    /// The version's field that names it.
    pub key: &'static str,
}

/// Input `repo` of a git resource, by commit.
pub const REPO: Input = Input {
    name: "repo",
    key: "ref",
};

/// The version (its `input.key` field) build `id` fetched as `input`.
pub fn input_of(url: &str, id: i64, input: Input) -> Option<String> {
    let r = api(url, &format!("/api/v1/builds/{id}/resources"));
    r["inputs"]
        .as_array()?
        .iter()
        .find(|i| i["name"] == input.name)
        .and_then(|i| i["version"][input.key].as_str().map(str::to_string))
}

/// The commit build `id` fetched as input `repo`.
pub fn input_ref(url: &str, id: i64) -> Option<String> {
    input_of(url, id, REPO)
}

/// (build number, version of `input`, status) of each build of a job,
/// oldest first.
pub fn runs_of(url: &str, p: &str, job: &str, input: Input) -> Vec<(i64, String, String)> {
    job_builds(url, p, job)
        .iter()
        .map(|b| {
            let id = b["id"].as_i64().unwrap();
            (
                b["build_number"].as_i64().unwrap_or(0),
                input_of(url, id, input).unwrap_or_default(),
                b["status"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// (build number, commit, status) of each build of a job, oldest first.
pub fn runs(url: &str, p: &str, job: &str) -> Vec<(i64, String, String)> {
    runs_of(url, p, job, REPO)
}

/// Waits until job `job` has a finished build whose `input` is `version`,
/// in `status`; answers that build.
pub fn wait_run_of(
    url: &str,
    p: &str,
    job: &str,
    input: Input,
    version: &str,
    status: &str,
) -> Value {
    wait_for(
        &format!("job {job} to finish a build of {version} as {status}"),
        Duration::from_secs(90),
        || {
            job_builds(url, p, job).into_iter().find_map(|b| {
                let id = b["id"].as_i64()?;
                (b["status"] == status && input_of(url, id, input).as_deref() == Some(version))
                    .then(|| b.clone())
            })
        },
    )
}

/// Waits until job `job` has a finished build of `commit` in `status`;
/// answers that build.
pub fn wait_run(url: &str, p: &str, job: &str, commit: &str, status: &str) -> Value {
    wait_run_of(url, p, job, REPO, commit, status)
}

/// Waits until the scheduling job has run a round that began at least a
/// round after `after` (unix ms): what it decides from then on saw it.
pub fn wait_rounds_after(url: &str, after: i64) {
    wait_for("two scheduling rounds", Duration::from_secs(30), || {
        let jobs = api(url, "/api/v1/background-jobs");
        let triggers = jobs
            .as_array()?
            .iter()
            .find(|j| j["name"] == "pipeline-triggers")?
            .clone();
        (triggers["last_run"].as_i64()? > after + 2_500).then_some(())
    });
}

/// Commits `msg` as the file `msg` in `work` (a clone with `origin`).
pub fn commit(work: &Path, msg: &str) -> String {
    write(&work.join("msg"), msg);
    git(work, &["add", "msg"]);
    git(work, &["commit", "-q", "-m", msg]);
    git(work, &["rev-parse", "HEAD"])
}

/// The stdout of a command that must have succeeded.
pub fn ok(out: &std::process::Output) -> String {
    let (stdout, stderr) = text(out);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    stdout
}
