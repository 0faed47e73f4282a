//! A real OCI registry for the tests: Debian's `docker-registry` (the CNCF
//! distribution registry) on loopback, over TLS with a CA made here and
//! with htpasswd basic auth; images built here from busybox-static are
//! pushed into it with `skopeo`, and its access log counts blob fetches.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::oci::{gzip, sha};
use super::{free_port, wait_for, Server};

/// The user and password the registry accepts.
pub const USER: &str = "ci";
/// The password of [`USER`].
pub const PASSWORD: &str = "s3cret-pass";

/// A registry serving on `127.0.0.1:port`.
pub struct Registry {
    /// `127.0.0.1:PORT`.
    pub host: String,
    /// The CA certificate (PEM) the registry's certificate is signed by.
    pub ca_pem: String,
    /// A directory holding `ca.crt`, for skopeo's `--dest-cert-dir`.
    cert_dir: PathBuf,
    /// The registry process; its log is the access log.
    server: Server,
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Registry {
    /// Starts a registry with its files under `dir`.
    pub fn start(dir: &Path) -> Registry {
        let dir = dir.join("registry");
        let certs = dir.join("certs");
        std::fs::create_dir_all(&certs).unwrap();
        let p = |name: &str| certs.join(name).to_str().unwrap().to_string();
        run(Command::new("openssl").args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=gantry-test-ca",
            "-keyout",
            &p("ca.key"),
            "-out",
            &p("ca.crt"),
        ]));
        run(Command::new("openssl").args([
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-keyout",
            &p("server.key"),
            "-out",
            &p("server.csr"),
        ]));
        std::fs::write(certs.join("ext.cnf"), "subjectAltName=IP:127.0.0.1\n").unwrap();
        run(Command::new("openssl").args([
            "x509",
            "-req",
            "-in",
            &p("server.csr"),
            "-CA",
            &p("ca.crt"),
            "-CAkey",
            &p("ca.key"),
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &p("ext.cnf"),
            "-out",
            &p("server.crt"),
        ]));
        let htpasswd = Command::new("htpasswd")
            .args(["-Bbn", USER, PASSWORD])
            .output()
            .unwrap();
        assert!(htpasswd.status.success());
        std::fs::write(dir.join("htpasswd"), &htpasswd.stdout).unwrap();
        let port = free_port();
        let config = format!(
            "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: false\nstorage:\n  filesystem:\n    rootdirectory: {root}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:{port}\n  tls:\n    certificate: {crt}\n    key: {key}\nauth:\n  htpasswd:\n    realm: gantry-test\n    path: {pw}\n",
            root = dir.join("storage").display(),
            crt = p("server.crt"),
            key = p("server.key"),
            pw = dir.join("htpasswd").display(),
        );
        std::fs::write(dir.join("config.yml"), config).unwrap();
        let mut cmd = Command::new("docker-registry");
        cmd.arg("serve").arg(dir.join("config.yml"));
        let server = Server::spawn(cmd, dir.join("registry.log"));
        let host = format!("127.0.0.1:{port}");
        wait_for("the registry to listen", Duration::from_secs(30), || {
            std::net::TcpStream::connect(&host).ok()
        });
        let cert_dir = dir.join("skopeo-certs");
        std::fs::create_dir_all(&cert_dir).unwrap();
        std::fs::copy(certs.join("ca.crt"), cert_dir.join("ca.crt")).unwrap();
        Registry {
            ca_pem: std::fs::read_to_string(certs.join("ca.crt")).unwrap(),
            host,
            cert_dir,
            server,
        }
    }

    /// Pushes the OCI layout directory `layout` as `name:tag` with skopeo.
    pub fn push(&self, layout: &Path, name: &str, tag: &str) {
        run(Command::new("skopeo").args([
            "copy",
            "--dest-cert-dir",
            self.cert_dir.to_str().unwrap(),
            "--dest-creds",
            &format!("{USER}:{PASSWORD}"),
            &format!("oci:{}", layout.display()),
            &format!("docker://{}/{name}:{tag}", self.host),
        ]));
    }

    /// The digest `name:tag` has in the registry (skopeo inspect).
    pub fn digest(&self, name: &str, tag: &str) -> String {
        let out = Command::new("skopeo")
            .args([
                "inspect",
                "--cert-dir",
                self.cert_dir.to_str().unwrap(),
                "--creds",
                &format!("{USER}:{PASSWORD}"),
                "--format",
                "{{.Digest}}",
                &format!("docker://{}/{name}:{tag}", self.host),
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Successful blob fetches (`GET /v2/.../blobs/sha256:...` answered
    /// 200) in the registry's log, by digest.
    pub fn blob_gets(&self) -> Vec<String> {
        self.server
            .log_text()
            .lines()
            .filter(|l| {
                l.contains("msg=\"response completed\"")
                    && l.contains("http.request.method=GET")
                    && l.contains("/blobs/sha256:")
                    && l.contains("http.response.status=200")
            })
            .filter_map(|l| {
                let at = l.find("/blobs/")? + "/blobs/".len();
                let rest = &l[at..];
                Some(rest[..rest.find(['"', ' '])?].to_string())
            })
            .collect()
    }

    /// The registry's log.
    pub fn log_text(&self) -> String {
        self.server.log_text()
    }

    /// The source fields of `name:tag` on this registry, as YAML flow.
    pub fn source(&self, name: &str, tag: &str) -> String {
        format!(
            "{{repository: \"{}/{name}\", tag: \"{tag}\", username: {USER}, password: {PASSWORD}, ca_certs: [{}]}}",
            self.host,
            serde_json::to_string(&self.ca_pem).unwrap()
        )
    }
}

/// Writes an OCI image layout directory at `out` whose layers are the
/// given tars (gzipped here), with `Env` and `User` in its config.
pub fn oci_layout_dir(out: &Path, layers: &[Vec<u8>], env: &[&str], user: &str) {
    let blobs_dir = out.join("blobs").join("sha256");
    std::fs::create_dir_all(&blobs_dir).unwrap();
    let mut descs = Vec::new();
    let mut diff_ids = Vec::new();
    let put = |data: &[u8]| {
        std::fs::write(blobs_dir.join(sha(data)), data).unwrap();
        format!("sha256:{}", sha(data))
    };
    for layer in layers {
        diff_ids.push(format!("sha256:{}", sha(layer)));
        let gz = gzip(layer);
        descs.push(serde_json::json!({
            "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
            "digest": put(&gz),
            "size": gz.len(),
        }));
    }
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": env, "User": user},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }))
    .unwrap();
    let config_digest = put(&config);
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": config.len()},
        "layers": descs,
    }))
    .unwrap();
    let manifest_digest = put(&manifest);
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest_digest, "size": manifest.len()}],
    });
    std::fs::write(out.join("index.json"), index.to_string()).unwrap();
    std::fs::write(out.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).unwrap();
}
