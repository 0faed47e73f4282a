//! Tar safety of the worker agent on its own: the malicious archives of
//! `tests/malicious_tars/` streamed straight into volumes of a real agent
//! (in process, `local` backend) through the runtime interface's
//! `Volume::stream_in`, bypassing the web node's validation. Each is refused
//! with an error naming the entry, or contained; a marker file next to the
//! work directory is never created, changed or hardlinked.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use gantry_wire::error::RuntimeError;
use gantry_wire::runtime::{ByteStream, Volume, Worker};
use gantry_wire::spec::{Encoding, VolumeSpec};

use super::test_support::test_config;
use gantry_agent::{start_worker, WorkerHandle};
use gantry_agent_client::AgentConnector;

use super::malicious_tars;

use malicious_tars::{catalogue, Expect, Outside, RawTar};

/// Directories between the base dir and a volume's contents:
/// `work/volumes/<handle>/data`.
const VOLUME_DEPTH: usize = 4;

/// A real agent on a loopback port, with `BASE/outside/marker.txt` next to
/// its work directory `BASE/work`.
struct Fixture {
    _tmp: tempfile::TempDir,
    base: PathBuf,
    outside: Outside,
    initial: malicious_tars::Snapshot,
    agent: WorkerHandle,
    worker: Arc<dyn Worker>,
}

impl Fixture {
    async fn start() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let outside = Outside::create(&base);
        let initial = outside.snapshot();
        let cfg = test_config("tar-safety", &base.join("work"), "local");
        let agent = start_worker(cfg).await.unwrap();
        let worker: Arc<dyn Worker> = Arc::new(AgentConnector::new().worker(agent.registration()));
        Fixture {
            _tmp: tmp,
            base,
            outside,
            initial,
            agent,
            worker,
        }
    }

    async fn volume(&self) -> (Arc<dyn Volume>, PathBuf) {
        let handle = uuid::Uuid::new_v4().to_string();
        let spec: VolumeSpec = serde_json::from_value(
            serde_json::json!({"handle": handle, "strategy": {"type": "empty"}}),
        )
        .unwrap();
        let volume = self.worker.create_volume(&spec).await.unwrap();
        let data = self.agent.state().volumes.get(&handle).unwrap().data_dir();
        assert_eq!(
            data.strip_prefix(&self.base).unwrap().components().count(),
            VOLUME_DEPTH,
            "the relative escapes of the catalogue aim at the marker"
        );
        (volume, data)
    }

    /// Asserts nothing changed outside the volumes: the marker, the entries
    /// of the base dir and of the work dir.
    fn assert_outside_untouched(&self, what: &str) {
        self.outside.assert_untouched(&self.initial, what);
        assert_eq!(
            names(&self.base),
            BTreeSet::from(["outside".to_string(), "work".to_string()]),
            "{what}: next to the work dir"
        );
        for name in names(&self.base.join("work/volumes")) {
            let dir = self.base.join("work/volumes").join(&name);
            assert_eq!(
                names(&dir),
                BTreeSet::from(["data".to_string(), "meta.json".to_string()]),
                "{what}: volume dir {name}"
            );
        }
    }
}

fn names(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// A stream of `data` in uneven chunks.
fn stream_of(data: Vec<u8>) -> ByteStream {
    let chunks: Vec<std::io::Result<Bytes>> = data
        .chunks(7919)
        .map(|c| Ok(Bytes::copy_from_slice(c)))
        .collect();
    Box::pin(futures::stream::iter(chunks))
}

/// Everything under `dir` (not following symlinks), as sorted
/// `path kind` lines: `file=CONTENTS`, `dir`, `link->TARGET`.
fn listing(dir: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.file_type().is_symlink() {
                let t = std::fs::read_link(&p).unwrap();
                out.push(format!("{rel} link->{}", t.display()));
            } else if m.is_dir() {
                out.push(format!("{rel} dir"));
                walk(root, &p, out);
            } else {
                assert!(
                    m.file_type().is_file(),
                    "{rel} is neither file, dir nor link"
                );
                let data = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned();
                out.push(format!("{rel} file={data}"));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// What a contained case must have unpacked.
fn expected_tree(name: &str) -> Vec<&'static str> {
    match name {
        "duplicate entries" => vec![
            "dup file=two!",
            "l file=now a file",
            "x dir",
            "x/inner file=inner",
        ],
        "symlink loop" => vec![
            "a link->b",
            "b link->a",
            "f file=plain",
            "self link->self",
            "sub dir",
            "sub/up link->..",
        ],
        other => panic!("no expected tree for contained case {other:?}"),
    }
}

#[actix_rt::test]
async fn malicious_archives_streamed_into_volumes_are_refused_or_contained() {
    let fx = Fixture::start().await;
    let cases = catalogue(&fx.base, VOLUME_DEPTH);
    assert!(cases.len() >= 10);
    let mut report = Vec::new();
    for case in &cases {
        for encoding in [Encoding::Raw, Encoding::Zstd, Encoding::Gzip] {
            let what = format!("{} ({})", case.name, encoding.as_str());
            let body = match encoding {
                Encoding::Raw => case.archive.clone(),
                Encoding::Zstd => malicious_tars::zstd(&case.archive),
                Encoding::Gzip => {
                    use std::io::Write;
                    let mut e =
                        flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
                    e.write_all(&case.archive).unwrap();
                    e.finish().unwrap()
                }
            };
            let (volume, data) = fx.volume().await;
            let result = volume.stream_in("", encoding, stream_of(body)).await;
            match (&case.expect, result) {
                (
                    Expect::Refused(parts),
                    Err(RuntimeError::Worker {
                        status, message, ..
                    }),
                ) => {
                    assert_eq!(status, 400, "{what}: {message}");
                    for part in parts {
                        assert!(message.contains(part), "{what}: {message:?} lacks {part:?}");
                    }
                    report.push(format!("refused {what}: {status} {message}"));
                }
                (
                    Expect::TooLarge,
                    Err(RuntimeError::Worker {
                        status, message, ..
                    }),
                ) => {
                    assert_eq!(status, 413, "{what}: {message}");
                    assert!(
                        message.contains("exceeds the size limit"),
                        "{what}: {message}"
                    );
                    report.push(format!("refused {what}: {status} {message}"));
                }
                (Expect::Contained, Ok(())) => {
                    assert_eq!(listing(&data), expected_tree(case.name), "{what}");
                    report.push(format!("contained {what}: {:?}", listing(&data)));
                }
                (expect, got) => panic!("{what}: expected {expect:?}, got {got:?}"),
            }
            // Whatever was refused, nothing in the volume leads outside it.
            for line in listing(&data) {
                if let Some((_, target)) = line.split_once(" link->") {
                    assert!(!target.starts_with('/'), "{what}: {line}");
                }
            }
            fx.assert_outside_untouched(&what);
        }
    }
    eprintln!("{}", report.join("\n"));
    fx.agent.stop().await;
}

#[actix_rt::test]
async fn stream_in_never_follows_symlinks_a_task_left_in_the_volume() {
    let fx = Fixture::start().await;
    let (volume, data) = fx.volume().await;
    // What a task could leave behind: links to the outside dir, absolute and
    // relative, and to the marker itself.
    let outside = fx.outside.dir.clone();
    std::os::unix::fs::symlink(&outside, data.join("abs")).unwrap();
    std::os::unix::fs::symlink("../../../../outside", data.join("rel")).unwrap();
    std::os::unix::fs::symlink(fx.outside.marker(), data.join("m")).unwrap();
    assert!(
        data.join("rel/marker.txt").exists(),
        "the relative link really leads out"
    );

    let tar = |t: RawTar| stream_of(t.finish());
    // Into a sub-path that is (or goes through) such a link.
    for sub in ["abs", "rel", "rel/deeper", "m"] {
        let r = volume
            .stream_in(
                sub,
                Encoding::Raw,
                tar(RawTar::new().file(b"new.txt", b"pwned")),
            )
            .await;
        match r {
            Err(RuntimeError::Worker {
                status: 400,
                message,
                ..
            }) => {
                assert!(message.contains(&format!("{sub:?}")), "{sub}: {message}");
            }
            other => panic!("stream-in at {sub:?}: {other:?}"),
        }
        fx.assert_outside_untouched(sub);
    }
    // A sub-path that climbs out.
    for sub in ["..", "../../../../outside", "/../..", "a/../../.."] {
        match volume
            .stream_in(
                sub,
                Encoding::Raw,
                tar(RawTar::new().file(b"new.txt", b"pwned")),
            )
            .await
        {
            Err(RuntimeError::Worker {
                status: 400,
                message,
                ..
            }) => {
                assert!(
                    message.contains("must stay inside the volume"),
                    "{sub}: {message}"
                );
            }
            other => panic!("stream-in at {sub:?}: {other:?}"),
        }
        fx.assert_outside_untouched(sub);
    }
    // Entries below such a link are refused ...
    for (entry, link) in [(&b"abs/new.txt"[..], "abs"), (b"rel/marker.txt", "rel")] {
        match volume
            .stream_in("", Encoding::Raw, tar(RawTar::new().file(entry, b"pwned")))
            .await
        {
            Err(RuntimeError::Worker {
                status: 400,
                message,
                ..
            }) => {
                assert!(
                    message.contains(&format!("its parent {link:?} is a symlink")),
                    "{message}"
                );
            }
            other => panic!("entry below {link}: {other:?}"),
        }
        fx.assert_outside_untouched(link);
    }
    // ... and an entry at a link's path replaces the link, never writes
    // through it; a hardlink to it is refused.
    volume
        .stream_in(
            "",
            Encoding::Raw,
            tar(RawTar::new()
                .file(b"m", b"replaced")
                .file(b"rel", b"replaced too")),
        )
        .await
        .unwrap();
    fx.assert_outside_untouched("replacing links");
    assert_eq!(std::fs::read(data.join("m")).unwrap(), b"replaced");
    assert!(std::fs::symlink_metadata(data.join("rel"))
        .unwrap()
        .is_file());
    match volume
        .stream_in(
            "",
            Encoding::Raw,
            tar(RawTar::new().hardlink(b"h", b"abs/marker.txt")),
        )
        .await
    {
        Err(RuntimeError::Worker {
            status: 400,
            message,
            ..
        }) => {
            assert!(message.contains("\"h\""), "{message}")
        }
        other => panic!("hardlink through a link: {other:?}"),
    }
    fx.assert_outside_untouched("hardlink through a link");
    fx.agent.stop().await;
}
