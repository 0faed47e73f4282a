//! Real git for end-to-end tests: a bare repository made by the test and a
//! `git daemon` serving it on loopback, as a git server would.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::{noise, wait_for, write};

/// Runs git in `dir` with a fixed identity.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .args(["-c", "user.name=Test", "-c", "user.email=t@example.com"])
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A bare repository `ROOT/NAME.git` (branch `main`) with one commit of
/// `files`; the work tree it was made in stays at `ROOT/NAME-seed`.
pub fn bare_repo_of(root: &Path, name: &str, files: &[(&str, &[u8])]) -> PathBuf {
    let work = root.join(format!("{name}-seed"));
    std::fs::create_dir_all(&work).unwrap();
    git(&work, &["init", "-q", "-b", "main"]);
    for (path, data) in files {
        write(&work.join(path), data);
    }
    git(&work, &["add", "."]);
    git(&work, &["commit", "-q", "-m", "seed"]);
    let bare = format!("{name}.git");
    git(
        root,
        &["clone", "-q", "--bare", work.to_str().unwrap(), &bare],
    );
    root.join(bare)
}

/// A bare repository with one commit of `data.txt`; returns its path and
/// the file's SHA-256.
pub fn bare_repo(root: &Path) -> (PathBuf, String) {
    let data = noise(100_000, 7);
    let bare = bare_repo_of(root, "repo", &[("data.txt", &data)]);
    let work = root.join("repo-seed");
    let sum = Command::new("sha256sum")
        .arg(work.join("data.txt"))
        .output()
        .unwrap();
    let sum = String::from_utf8_lossy(&sum.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    (bare, sum)
}

/// `git daemon` serving `root` on loopback (pushes allowed): the
/// containers reach it over the network, as they would a git server.
pub struct GitDaemon {
    child: std::process::Child,
    port: u16,
}

impl GitDaemon {
    pub fn serve(root: &Path) -> GitDaemon {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // `git-daemon` itself, not `git daemon`: the `git` wrapper runs the
        // daemon as its child, which killing the wrapper would leave
        // behind, serving and holding the test's output open.
        let exec_path = git(root, &["--exec-path"]);
        let child = Command::new(Path::new(&exec_path).join("git-daemon"))
            .args(["--reuseaddr", "--export-all", "--enable=receive-pack"])
            .arg(format!("--base-path={}", root.display()))
            .args(["--listen=127.0.0.1", &format!("--port={port}")])
            .arg(root)
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("git daemon starts");
        wait_for("git daemon", Duration::from_secs(20), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()
        });
        GitDaemon { child, port }
    }

    pub fn uri(&self, repo: &str) -> String {
        format!("git://127.0.0.1:{}/{repo}", self.port)
    }
}

impl Drop for GitDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
