//! A real S3-compatible server for the tests: `s3s-fs` (the s3s project's
//! server, from crates.io), which keeps each object as a file under its
//! data dir, so a server killed and started again on the same port and
//! data dir still has every object it stored. `scripts/test.sh` installs
//! it and names it in `GANTRY_S3_SERVER`; without it a test skips, except
//! when the test script requires every test to run (`GANTRY_REQUIRE_RUNC`),
//! where it fails.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::{free_port, wait_for, Server};

/// The access key the server accepts.
pub const ACCESS_KEY: &str = "gantry-test";
/// The secret key of [`ACCESS_KEY`].
pub const SECRET_KEY: &str = "gantry-test-secret";
/// The bucket every test uses.
pub const BUCKET: &str = "gantry-artifacts";

/// The `s3s-fs` binary: `GANTRY_S3_SERVER`, else the test script's install
/// (`target/s3s/bin/s3s-fs`), else one on `PATH`.
fn binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("GANTRY_S3_SERVER") {
        let path = PathBuf::from(path);
        assert!(
            path.is_file(),
            "GANTRY_S3_SERVER={} is not a file",
            path.display()
        );
        return Some(path);
    }
    let installed = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/s3s/bin/s3s-fs");
    if installed.is_file() {
        return Some(installed);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("s3s-fs"))
            .find(|p| p.is_file())
    })
}

/// The `s3s-fs` binary, or `None` (the test skips) when it is missing and
/// the test script does not require every test to run.
pub fn s3_server_here() -> Option<PathBuf> {
    let found = binary();
    if found.is_none() {
        assert!(
            std::env::var_os("GANTRY_REQUIRE_RUNC").is_none(),
            "GANTRY_REQUIRE_RUNC is set, so this test may not be skipped: needs s3s-fs (GANTRY_S3_SERVER; scripts/test.sh installs it)"
        );
        eprintln!("skipped: needs s3s-fs (GANTRY_S3_SERVER; scripts/test.sh installs it)");
    }
    found
}

/// An `s3s-fs` serving `127.0.0.1:port` from `root`, with [`BUCKET`].
pub struct S3Server {
    /// Its port, kept across a restart.
    pub port: u16,
    /// Its data dir: `root/BUCKET/KEY` is an object; multipart uploads in
    /// progress are files at the top.
    pub root: PathBuf,
    /// The binary.
    binary: PathBuf,
    /// Where its logs go.
    dir: PathBuf,
    /// The process, while it runs.
    server: Option<Server>,
    /// Starts so far (each logs to a file of its own).
    starts: usize,
}

impl S3Server {
    /// Starts `binary` on a free port with its data under `dir/s3`.
    pub fn start(binary: PathBuf, dir: &Path) -> S3Server {
        let root = dir.join("s3/data");
        std::fs::create_dir_all(root.join(BUCKET)).unwrap();
        let mut s = S3Server {
            port: free_port(),
            root,
            binary,
            dir: dir.join("s3"),
            server: None,
            starts: 0,
        };
        s.restart();
        s
    }

    /// The S3 API's URL.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Kills the server (SIGKILL): requests in flight fail.
    pub fn kill(&mut self) {
        if let Some(mut s) = self.server.take() {
            s.kill();
        }
    }

    /// Starts the server (again) on the same port and data dir, and waits
    /// until it accepts connections.
    pub fn restart(&mut self) {
        self.kill();
        self.starts += 1;
        let mut cmd = Command::new(&self.binary);
        cmd.args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
            .arg(&self.root);
        let log = self.dir.join(format!("s3s-fs.{}.log", self.starts));
        self.server = Some(Server::spawn(cmd, log));
        let addr = format!("127.0.0.1:{}", self.port);
        wait_for("s3s-fs to listen", Duration::from_secs(30), || {
            std::net::TcpStream::connect(&addr).ok()
        });
    }

    /// The lines of a web node's TOML config that keep its artifacts under
    /// `prefix` of [`BUCKET`]: `artifacts` (for the `[web]` table) and the
    /// `[web.s3]` table, which must come after every `[web]` key.
    pub fn web_config(&self, prefix: &str) -> (String, String) {
        (
            format!("artifacts = \"s3://{BUCKET}/{prefix}\"\n"),
            format!(
                "[web.s3]\nendpoint = \"{}\"\nregion = \"us-east-1\"\naccess_key_id = \"{ACCESS_KEY}\"\nsecret_access_key = \"{SECRET_KEY}\"\n",
                self.endpoint()
            ),
        )
    }

    /// The keys under `prefix` an S3 `ListObjectsV2` of the bucket lists
    /// (what any client sees).
    pub fn list(&self, prefix: &str) -> BTreeSet<String> {
        use futures::TryStreamExt as _;
        use object_store::ObjectStore as _;
        let prefix = object_store::path::Path::from(prefix);
        runtime()
            .block_on(
                self.client()
                    .list(Some(&prefix))
                    .map_ok(|m| m.location.to_string())
                    .try_collect(),
            )
            .unwrap_or_else(|e| panic!("listing the bucket: {e}"))
    }

    /// The bytes of object `key` of the bucket, or `None` when it has none.
    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        use object_store::ObjectStoreExt as _;
        let client = self.client();
        let key = object_store::path::Path::from(key);
        runtime().block_on(async {
            match client.get(&key).await {
                Ok(got) => Some(got.bytes().await.expect("reading an object").to_vec()),
                Err(object_store::Error::NotFound { .. }) => None,
                Err(e) => panic!("reading {key}: {e}"),
            }
        })
    }

    /// A client of the bucket.
    fn client(&self) -> object_store::aws::AmazonS3 {
        object_store::aws::AmazonS3Builder::new()
            .with_bucket_name(BUCKET)
            .with_endpoint(self.endpoint())
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_access_key_id(ACCESS_KEY)
            .with_secret_access_key(SECRET_KEY)
            .build()
            .unwrap()
    }

    /// The artifact ids (`PREFIX/{id}.tar.zst`) the bucket lists under
    /// `prefix`; any other key but the store's id is an error.
    pub fn artifact_ids(&self, prefix: &str) -> Result<BTreeSet<String>, String> {
        let mut ids = BTreeSet::new();
        for key in self.list(prefix) {
            let name = key.strip_prefix(&format!("{prefix}/")).unwrap_or(&key);
            if name == ".store-id" {
                continue;
            }
            match name.strip_suffix(".tar.zst") {
                Some(id) => ids.insert(id.to_string()),
                None => return Err(format!("an object that is no artifact: {key}")),
            };
        }
        Ok(ids)
    }

    /// Multipart uploads in progress or abandoned (their parts are files
    /// at the top of the data dir, never listed in the bucket).
    pub fn parts_on_disk(&self) -> usize {
        std::fs::read_dir(&self.root)
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with(".upload_id-"))
                    .count()
            })
            .unwrap_or(0)
    }
}

/// A runtime for one blocking call of the object store client.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}
