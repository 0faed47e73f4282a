//! A real S3-compatible server for the tests: the `s3_test_server`
//! example (`examples/s3_test_server.rs`, which `cargo test` builds: the
//! s3s project's file-system store, `s3s-fs`, behind its S3 protocol
//! layer), which keeps
//! each object as a file under its data dir, so a server killed and
//! started again on the same port and data dir still has every object it
//! stored.

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

/// The `s3_test_server` example, beside the `gantry` binary the tests run.
pub fn binary() -> PathBuf {
    let path = Path::new(env!("CARGO_BIN_EXE_gantry"))
        .with_file_name("examples")
        .join("s3_test_server");
    assert!(
        path.is_file(),
        "{} is missing: `cargo test` builds it (cargo build --example s3_test_server)",
        path.display()
    );
    path
}

/// An S3 server serving `127.0.0.1:port` from `root`, with [`BUCKET`].
pub struct S3Server {
    /// Its port, kept across a restart.
    pub port: u16,
    /// Its data dir: `root/BUCKET/KEY` is an object; multipart uploads in
    /// progress are files at the top.
    pub root: PathBuf,
    /// Where its logs go.
    dir: PathBuf,
    /// The process, while it runs.
    server: Option<Server>,
    /// Starts so far (each logs to a file of its own).
    starts: usize,
}

impl S3Server {
    /// Starts the server on a free port with its data under `dir/s3`.
    pub fn start(dir: &Path) -> S3Server {
        let root = dir.join("s3/data");
        std::fs::create_dir_all(root.join(BUCKET)).unwrap();
        let mut s = S3Server {
            port: free_port(),
            root,
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
        let mut cmd = Command::new(binary());
        cmd.args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
            .arg(&self.root);
        let log = self.dir.join(format!("s3-server.{}.log", self.starts));
        self.server = Some(Server::spawn(cmd, log));
        let addr = format!("127.0.0.1:{}", self.port);
        wait_for("the S3 server to listen", Duration::from_secs(30), || {
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
    /// `prefix`; any other key but the store's id and finished builds'
    /// logs (`PREFIX/logs/`) is an error.
    pub fn artifact_ids(&self, prefix: &str) -> Result<BTreeSet<String>, String> {
        let mut ids = BTreeSet::new();
        for key in self.list(prefix) {
            let name = key.strip_prefix(&format!("{prefix}/")).unwrap_or(&key);
            if name == ".store-id" || name.starts_with("logs/") {
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
