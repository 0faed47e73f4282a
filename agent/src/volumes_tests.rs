//! Tests of the volume store.

use super::*;
use gantry_files::dir_fd::Kind;
use std::collections::BTreeMap;

fn spec(handle: &str, strategy: VolumeStrategy) -> VolumeSpec {
    VolumeSpec {
        handle: handle.into(),
        strategy,
        privileged: false,
        properties: BTreeMap::new(),
    }
}

#[test]
fn relative_paths_never_climb_out() {
    assert_eq!(relative_path("").unwrap(), PathBuf::new());
    assert_eq!(relative_path("/a/./b/").unwrap(), PathBuf::from("a/b"));
    assert!(relative_path("a/../../etc").is_err());
    assert!(relative_path("..").is_err());
}

#[tokio::test]
async fn volumes_survive_a_restart_and_unfinished_ones_are_removed() {
    let work = tempfile::tempdir().unwrap();
    let store = VolumeStore::open(work.path()).await.unwrap();
    let (v, created) = store
        .create(spec("v1", VolumeStrategy::Empty))
        .await
        .unwrap();
    assert!(created);
    std::fs::write(v.data_dir().join("f"), b"hello").unwrap();
    let (child, _) = store
        .create(spec(
            "v2",
            VolumeStrategy::Cow {
                parent: "v1".into(),
            },
        ))
        .await
        .unwrap();
    assert_eq!(std::fs::read(child.data_dir().join("f")).unwrap(), b"hello");
    // The parent cannot be destroyed while its child exists.
    let refused = store.destroy("v1").await.unwrap_err();
    assert!(
        refused.to_string().contains("has child volumes"),
        "{refused}"
    );
    std::fs::create_dir_all(work.path().join("volumes/half/data")).unwrap();

    let store = VolumeStore::open(work.path()).await.unwrap();
    assert_eq!(store.handles(), vec!["v1".to_string(), "v2".to_string()]);
    assert!(!work.path().join("volumes/half").exists());
    assert_eq!(store.size(&store.get("v1").unwrap()).await.unwrap(), 5);
    assert!(store.destroy("v1").await.is_err());
    store.destroy("v2").await.unwrap();
    store.destroy("v1").await.unwrap();
    store.destroy("v1").await.unwrap();
    assert!(store.handles().is_empty());
}

#[tokio::test]
async fn symlinks_cannot_lead_reads_or_writes_out_of_a_volume() {
    let work = tempfile::tempdir().unwrap();
    let store = VolumeStore::open(work.path()).await.unwrap();
    let (v, _) = store
        .create(spec("v", VolumeStrategy::Empty))
        .await
        .unwrap();
    std::os::unix::fs::symlink("/etc", v.data_dir().join("out")).unwrap();
    let err = store.file_out("v", "out/hostname").await.err().unwrap();
    assert!(matches!(err, AgentError::BadRequest(_)), "{err}");
    let body: ByteStream = Box::pin(futures::stream::empty());
    let err = store
        .stream_in("v", "out/x", Encoding::Raw, body)
        .await
        .unwrap_err();
    assert!(matches!(err, AgentError::BadRequest(_)), "{err}");
    let err = store.file_out("v", "missing").await.err().unwrap();
    assert!(
        matches!(err, AgentError::NotFound { kind: "path", .. }),
        "{err}"
    );
}

/// A store with a volume `v` holding `a/b/f.txt` ("inside"), next to a
/// host directory `host` with the same names ("secret") and a sparse
/// 1 GiB `a/b/big`, which nothing may read or write.
async fn volume_next_to_host() -> (tempfile::TempDir, VolumeStore, PathBuf, PathBuf) {
    let work = tempfile::tempdir().unwrap();
    let host = work.path().join("host");
    std::fs::create_dir_all(host.join("a/b")).unwrap();
    std::fs::write(host.join("a/b/f.txt"), b"secret").unwrap();
    std::fs::File::create(host.join("a/b/big"))
        .unwrap()
        .set_len(BIG)
        .unwrap();
    let store = VolumeStore::open(&work.path().join("work")).await.unwrap();
    let (v, _) = store
        .create(spec("v", VolumeStrategy::Empty))
        .await
        .unwrap();
    let data = v.data_dir();
    std::fs::create_dir_all(data.join("a/b")).unwrap();
    std::fs::write(data.join("a/b/f.txt"), b"inside").unwrap();
    (work, store, data, host)
}

/// Bytes of the sparse file next to the volume.
const BIG: u64 = 1 << 30;

/// Every path under `dir` with the contents of its files (`"big"` for a
/// file of more than 1 MiB).
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let root = Dir::open(dir).unwrap();
    let mut all = Vec::new();
    root.walk(|e| {
        let body = match e.stat.kind {
            Kind::File if e.stat.size > 1 << 20 => b"big".to_vec(),
            Kind::File => {
                let mut body = Vec::new();
                std::io::Read::read_to_end(&mut e.parent.open_file(e.name)?, &mut body)?;
                body
            }
            _ => Vec::new(),
        };
        all.push((e.path.display().to_string(), body));
        Ok(true)
    })
    .unwrap();
    all
}

fn assert_host_untouched(host: &Path) {
    assert_eq!(
        tree(host),
        vec![
            ("a".to_string(), vec![]),
            ("a/b".to_string(), vec![]),
            ("a/b/big".to_string(), b"big".to_vec()),
            ("a/b/f.txt".to_string(), b"secret".to_vec()),
        ]
    );
}

/// A raw tar stream of one file.
fn one_file_tar(name: &str, body: &[u8]) -> ByteStream {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(body.len() as u64);
    h.set_mode(0o644);
    b.append_data(&mut h, name, body).unwrap();
    let bytes = bytes::Bytes::from(b.into_inner().unwrap());
    Box::pin(futures::stream::iter(vec![Ok(bytes)]))
}

/// Everything a stream yields, or its first error.
async fn collect(mut s: ByteStream) -> std::io::Result<Vec<u8>> {
    use futures::StreamExt;
    let mut out = Vec::new();
    while let Some(chunk) = s.next().await {
        out.extend_from_slice(&chunk?);
    }
    Ok(out)
}

/// The contents of the files of a raw tar (symlinks give their target).
fn tar_bodies(data: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut ar = tar::Archive::new(data);
    ar.entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let name = String::from_utf8_lossy(&e.path_bytes()).into_owned();
            let mut body = Vec::new();
            match e.link_name_bytes() {
                Some(l) => body = l.into_owned(),
                None => drop(std::io::Read::read_to_end(&mut e, &mut body).unwrap()),
            }
            (name, body)
        })
        .collect()
}

#[tokio::test]
async fn a_symlink_planted_at_any_level_is_refused_by_every_stream() {
    for level in ["a", "a/b", "a/b/f.txt"] {
        let (_work, store, data, host) = volume_next_to_host().await;
        std::fs::rename(data.join(level), data.join(format!("{level}.old"))).unwrap();
        std::os::unix::fs::symlink(host.join(level), data.join(level)).unwrap();

        let symlink_refused = |r: Result<(), AgentError>| match r {
            Err(AgentError::BadRequest(m)) => assert!(m.contains("symlink"), "{level}: {m}"),
            other => panic!("{level}: {other:?}"),
        };
        symlink_refused(store.file_out("v", "a/b/f.txt").await.map(drop));
        symlink_refused(
            store
                .stream_out("v", "a/b/f.txt", Encoding::Raw)
                .await
                .map(drop),
        );
        if level == "a/b/f.txt" {
            // The link itself is inside a directory that is fine: packed
            // as a link, never followed.
            let s = store.stream_out("v", "a/b", Encoding::Raw).await.unwrap();
            let entries = tar_bodies(&collect(s).await.unwrap());
            let target = host.join(level).into_os_string().into_encoded_bytes();
            assert_eq!(
                entries,
                vec![
                    ("f.txt".to_string(), target),
                    ("f.txt.old".to_string(), b"inside".to_vec())
                ]
            );
        } else {
            symlink_refused(store.stream_out("v", "a/b", Encoding::Raw).await.map(drop));
            let body = one_file_tar("pwned.txt", b"pwned");
            symlink_refused(store.stream_in("v", "a/b/c", Encoding::Raw, body).await);
            let body = one_file_tar("b/pwned.txt", b"pwned");
            let r = store.stream_in("v", "a", Encoding::Raw, body).await;
            assert!(
                matches!(r, Err(AgentError::BadRequest(_))),
                "{level}: {r:?}"
            );
        }
        assert_host_untouched(&host);
    }
}

#[tokio::test]
async fn a_container_swapping_directories_cannot_redirect_any_volume_operation() {
    // Another thread plays a process in a container sharing the volume:
    // it keeps exchanging `a` with a symlink to the host directory while
    // the agent streams in and out, copies and measures the volume.
    let (_work, store, data, host) = volume_next_to_host().await;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flipper = gantry_files::testing::flip_until(&data.join("a"), &host.join("a"), stop.clone());
    let mut done = [0u32; 4];
    for i in 0..120 {
        let body = one_file_tar(&format!("new{i}.txt"), b"pwned");
        match store.stream_in("v", "a/b", Encoding::Raw, body).await {
            Ok(()) => done[0] += 1,
            Err(AgentError::BadRequest(_)) | Err(AgentError::Conflict(_)) => {}
            Err(e) => panic!("{e}"),
        }
        match store.stream_out("v", "a/b", Encoding::Raw).await {
            Ok(s) => {
                let data = collect(s).await.unwrap();
                for (name, body) in tar_bodies(&data) {
                    assert_ne!(body, b"secret", "{name}");
                }
                done[1] += 1;
            }
            Err(AgentError::BadRequest(_)) | Err(AgentError::Conflict(_)) => {}
            Err(e) => panic!("{e}"),
        }
        match store.file_out("v", "a/b/f.txt").await {
            Ok(s) => {
                assert_eq!(collect(s).await.unwrap(), b"inside");
                done[2] += 1;
            }
            Err(AgentError::BadRequest(_)) | Err(AgentError::Conflict(_)) => {}
            Err(e) => panic!("{e}"),
        }
        if i % 10 == 0 {
            let handle = format!("copy{i}");
            let cow = VolumeStrategy::Cow { parent: "v".into() };
            let (copy, _) = store.create(spec(&handle, cow)).await.unwrap();
            for (name, body) in tree(&copy.data_dir()) {
                assert_ne!(body, b"secret", "{name}");
            }
            store.destroy(&handle).await.unwrap();
            // Only the volume's own bytes are counted, never the host's.
            let size = store.size(&store.get("v").unwrap()).await.unwrap();
            assert!(size < BIG, "{size}");
            done[3] += 1;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    assert!(flips > 0);
    assert!(done[1] > 0 && done[2] > 0, "nothing got through: {done:?}");
    assert_host_untouched(&host);
    eprintln!("{flips} flips; stream-in, stream-out, file-out, copies done: {done:?}");
}
